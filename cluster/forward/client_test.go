package forward

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/outcome"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// fakeLeader accepts one follower connection and lets the test script the
// answers to its requests.
type fakeLeader struct {
	ln   net.Listener
	reqs chan fakeRequest
}

type fakeRequest struct {
	id    uint64
	batch codec.BatchID
	ops   []engine.Op
	c     net.Conn
}

func newFakeLeader(t *testing.T) *fakeLeader {
	t.Helper()
	f := &fakeLeader{reqs: make(chan fakeRequest, 16)}
	f.ln = testkit.Serve(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		hello := make([]byte, len(Hello))
		if _, err := io.ReadFull(br, hello); err != nil || string(hello) != Hello {
			c.Close()
			return
		}
		for {
			p, err := peer.ReadFrame(br, MaxRequest)
			if err != nil {
				c.Close()
				return
			}
			d := codec.NewDecoder(p)
			r := fakeRequest{id: d.Uvarint(), c: c}
			d.Uvarint()
			copy(r.batch[:], d.B)
			d.B = d.B[len(r.batch):]
			r.ops = d.Ops()
			if len(r.ops) == 0 { // a ping
				r.reply(t, r.id, StatusOK, codec.AppendResults(nil, nil, nil))
				continue
			}
			f.reqs <- r
		}
	})
	return f
}

func (r fakeRequest) reply(t *testing.T, id uint64, status byte, body []byte) {
	p := binary.AppendUvarint(nil, id)
	p = append(p, status)
	p = append(p, body...)
	if _, err := r.c.Write(peer.Frame(p)); err != nil {
		t.Error(err)
	}
}

func TestForwardClient(t *testing.T) {
	timeout := 2 * time.Second
	ops := []engine.Op{decide("a", tokenRule, 1), decide("b", tokenRule, 1)}
	tests := []struct {
		name   string
		answer func(t *testing.T, r fakeRequest)
		check  func(a outcome.Attempt, res []engine.Result) bool
	}{
		{"results", func(t *testing.T, r fakeRequest) {
			r.reply(t, r.id+100, StatusOK, codec.AppendResults(nil, nil, make([]engine.Result, 2))) // not ours: ignored
			r.reply(t, r.id, StatusOK, codec.AppendResults(nil, nil, []engine.Result{{Allowed: true, Limit: 5}, {Err: engine.ErrWrongType}}))
		}, func(a outcome.Attempt, res []engine.Result) bool {
			err := a.Reply()
			return err == nil && res[0].Allowed && res[0].Limit == 5 && res[1].Err == engine.ErrWrongType
		}},
		{"error reply", func(t *testing.T, r fakeRequest) {
			r.reply(t, r.id, StatusError, codec.AppendError(nil, errLoading))
		}, func(a outcome.Attempt, _ []engine.Result) bool {
			return a.Kind == outcome.TryDone && a.Err == errLoading
		}},
		{"route again", func(t *testing.T, r fakeRequest) {
			r.reply(t, r.id, StatusRetry, codec.AppendStr(nil, []byte("not the leader")))
		}, func(a outcome.Attempt, _ []engine.Result) bool { return a.Kind == outcome.TryNotApplied }},
		{"connection lost after sending: send again", func(t *testing.T, r fakeRequest) {
			r.c.Close()
		}, func(a outcome.Attempt, _ []engine.Result) bool { return a.Kind == outcome.TryWritten }},
		{"garbage results", func(t *testing.T, r fakeRequest) {
			r.reply(t, r.id, StatusOK, []byte{7})
		}, func(a outcome.Attempt, _ []engine.Result) bool {
			err := a.Reply()
			return errors.Is(err, outcome.ErrUncertain) && !errors.Is(err, errClusterDown)
		}},
		{"uncertain reply", func(t *testing.T, r fakeRequest) {
			r.reply(t, r.id, StatusError, codec.AppendError(nil, outcome.CommitTimeoutError(time.Second)))
		}, func(a outcome.Attempt, _ []engine.Result) bool {
			err := a.Reply()
			return errors.Is(err, outcome.ErrUncertain) && !errors.Is(err, errClusterDown)
		}},
		{"clusterdown reply of another timeout", func(t *testing.T, r fakeRequest) {
			r.reply(t, r.id, StatusError, codec.AppendError(nil, outcome.ClusterDownError(time.Minute)))
		}, func(a outcome.Attempt, _ []engine.Result) bool {
			err := a.Reply()
			return errors.Is(err, errClusterDown) && !errors.Is(err, outcome.ErrUncertain)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			leader := newFakeLeader(t)
			c := newFwdClient(0, 1, timeout, peer.NewTimeouts(timeout, time.Second), peer.TCPNetwork{T: peer.NewTimeouts(timeout, time.Second)})
			defer c.Close()
			id := c.NewBatchID()
			res := make([]engine.Result, len(ops))
			errc := make(chan outcome.Attempt, 1)
			deadline := time.NewTimer(timeout)
			defer deadline.Stop()
			go func() {
				errc <- submitTo(c, context.Background(), deadline.C, time.Now().Add(timeout), leader.ln.Addr().String(), id, ops, res)
			}()
			r := <-leader.reqs
			if len(r.ops) != 2 || string(r.ops[1].Key) != "b" || r.batch != id {
				t.Fatalf("leader got %+v", r)
			}
			tt.answer(t, r)
			if a := <-errc; !tt.check(a, res) {
				t.Fatalf("outcome.Attempt %+v, results %+v", a, res)
			}
		})
	}
}

func TestForwardClientNoLeader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens: the dial fails, nothing was sent
	c := newFwdClient(0, 1, time.Second, peer.NewTimeouts(time.Second, time.Second), peer.TCPNetwork{T: peer.NewTimeouts(time.Second, time.Second)})
	deadline := time.NewTimer(time.Second)
	defer deadline.Stop()
	a := submitTo(c, context.Background(), deadline.C, time.Now().Add(time.Second), addr, c.NewBatchID(), []engine.Op{decide("a", tokenRule, 1)}, make([]engine.Result, 1))
	if a.Kind != outcome.TryNotApplied {
		t.Fatalf("outcome.Attempt %+v, want not applied (route again)", a)
	}
}

// TestForwardClientTimeout: a call written and never answered is
// UNCERTAIN (the leader may have applied it), never CLUSTERDOWN, and its
// connection is dropped: the next call dials a new one and gets through,
// even though the old connection stays silent forever (as one stuck
// behind TCP's retransmission backoff would).
func TestForwardClientTimeout(t *testing.T) {
	leader := newFakeLeader(t)
	timeout := 100 * time.Millisecond
	c := newFwdClient(0, 1, timeout, peer.NewTimeouts(timeout, time.Second), peer.TCPNetwork{T: peer.NewTimeouts(timeout, time.Second)})
	defer c.Close()
	addr := leader.ln.Addr().String()
	call := func() (error, time.Duration) {
		deadline := time.NewTimer(timeout)
		defer deadline.Stop()
		start := time.Now()
		err := submitTo(c, context.Background(), deadline.C, time.Now().Add(timeout), addr, c.NewBatchID(),
			[]engine.Op{decide("a", tokenRule, 1)}, make([]engine.Result, 1)).Reply()
		return err, time.Since(start)
	}
	err, took := call()
	if !errors.Is(err, outcome.ErrUncertain) || errors.Is(err, errClusterDown) || errcode.Of(err).Code.Class() != errcode.MayHaveApplied || took > time.Second {
		t.Fatalf("err = %v after %v, want UNCERTAIN", err, took)
	}
	stuck := <-leader.reqs // never answered on this connection
	c.mu.Lock()
	pooled := len(c.conns)
	c.mu.Unlock()
	if pooled != 0 {
		t.Fatalf("%d connections pooled after a call timed out on one; want it dropped", pooled)
	}
	// The next call dials afresh; the fake leader answers on the new
	// connection only.
	errc := make(chan error, 1)
	go func() { err, _ := call(); errc <- err }()
	r := <-leader.reqs
	if r.c == stuck.c {
		t.Fatal("the second call used the connection whose call timed out")
	}
	r.reply(t, r.id, StatusOK, codec.AppendResults(nil, nil, []engine.Result{{Allowed: true}}))
	if err := <-errc; err != nil {
		t.Fatalf("second call: %v", err)
	}
}

// fakeConn is one connection of scriptedLeader.
type fakeConn struct {
	mute  atomic.Bool  // answer nothing, not even pings
	pings atomic.Int32 // pings answered
}

// scriptedLeader answers every request with results of as many ops (all
// allowed) and every ping, on each connection until the test mutes it.
type scriptedLeader struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []*fakeConn
}

func newScriptedLeader(t *testing.T) *scriptedLeader {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	l := &scriptedLeader{ln: ln}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			fc := &fakeConn{}
			l.mu.Lock()
			l.conns = append(l.conns, fc)
			l.mu.Unlock()
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				hello := make([]byte, len(Hello))
				if _, err := io.ReadFull(br, hello); err != nil {
					return
				}
				for {
					p, err := peer.ReadFrame(br, MaxRequest)
					if err != nil {
						return
					}
					if fc.mute.Load() {
						continue
					}
					d := codec.NewDecoder(p)
					id := d.Uvarint()
					d.Uvarint()
					d.B = d.B[len(codec.BatchID{}):]
					ops := d.Ops()
					if len(ops) == 0 {
						fc.pings.Add(1)
					}
					q := binary.AppendUvarint(nil, id)
					q = append(q, StatusOK)
					q = codec.AppendResults(q, nil, make([]engine.Result, len(ops)))
					if _, err := nc.Write(peer.Frame(q)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l
}

func (l *scriptedLeader) conn(i int) *fakeConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i >= len(l.conns) {
		return nil
	}
	return l.conns[i]
}

func (l *scriptedLeader) accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// TestForwardClientHealthCheck: a pooled connection that has heard nothing
// for the idle time is pinged before it carries a call; one that does not
// answer the ping in time is dropped and the call goes through a new
// connection, one that answers is kept.
func TestForwardClientHealthCheck(t *testing.T) {
	timeout := 2 * time.Second
	pt := peer.NewTimeouts(timeout, time.Second)
	pt.Idle, pt.Ping = 50*time.Millisecond, 100*time.Millisecond
	tests := []struct {
		name      string
		mute      bool // the first connection goes silent while idle
		wantConns int
	}{
		{"silent connection dropped", true, 2},
		{"live connection kept", false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newScriptedLeader(t)
			c := newFwdClient(0, 1, timeout, pt, peer.TCPNetwork{T: pt})
			defer c.Close()
			call := func() (error, time.Duration) {
				deadline := time.NewTimer(timeout)
				defer deadline.Stop()
				start := time.Now()
				err := submitTo(c, context.Background(), deadline.C, time.Now().Add(timeout), l.ln.Addr().String(), c.NewBatchID(),
					[]engine.Op{decide("a", tokenRule, 1)}, make([]engine.Result, 1)).Reply()
				return err, time.Since(start)
			}
			if err, _ := call(); err != nil {
				t.Fatal(err)
			}
			first := l.conn(0)
			if first.pings.Load() != 0 {
				t.Fatal("a fresh connection was pinged")
			}
			first.mute.Store(tt.mute)
			// Wait until the pooled connection counts as idle.
			waitFor(t, 5*time.Second, func() error {
				c.mu.Lock()
				defer c.mu.Unlock()
				if len(c.conns) != 1 || time.Since(time.Unix(0, c.conns[0].lastRecv.Load())) < pt.Idle {
					return errors.New("not idle yet")
				}
				return nil
			})
			err, took := call()
			if err != nil {
				t.Fatalf("call after idle: %v", err)
			}
			if got := l.accepted(); got != tt.wantConns {
				t.Fatalf("%d connections accepted, want %d", got, tt.wantConns)
			}
			if !tt.mute && first.pings.Load() != 1 {
				t.Fatalf("%d pings on the idle connection, want 1", first.pings.Load())
			}
			if tt.mute && took > pt.Ping+time.Second {
				t.Fatalf("the call took %v behind a silent connection", took)
			}
		})
	}
}

// TestForwardLeaderChangeKeepsPendingCalls: a follower's call is written
// to the old leader; meanwhile another call goes to a new leader (the pool
// moves there). The first call still gets the old leader's answer (its
// results), not a broken connection and a re-send that could only be
// answered UNCERTAIN had it applied; the old connection closes once that
// answer came.
func TestForwardLeaderChangeKeepsPendingCalls(t *testing.T) {
	oldLeader, newLeader := newFakeLeader(t), newFakeLeader(t)
	timeout := 2 * time.Second
	c := newFwdClient(0, 1, timeout, peer.NewTimeouts(timeout, time.Second), peer.TCPNetwork{T: peer.NewTimeouts(timeout, time.Second)})
	defer c.Close()
	send := func(addr string, res []engine.Result) chan error {
		errc := make(chan error, 1)
		go func() {
			deadline := time.NewTimer(timeout)
			defer deadline.Stop()
			errc <- submitTo(c, context.Background(), deadline.C, time.Now().Add(timeout), addr, c.NewBatchID(),
				[]engine.Op{decide("a", tokenRule, 1)}, res).Reply()
		}()
		return errc
	}
	res1 := make([]engine.Result, 1)
	first := send(oldLeader.ln.Addr().String(), res1)
	r1 := <-oldLeader.reqs
	c.mu.Lock()
	oldConn := c.conns[0]
	c.mu.Unlock()
	second := send(newLeader.ln.Addr().String(), make([]engine.Result, 1))
	r2 := <-newLeader.reqs
	r2.reply(t, r2.id, StatusOK, codec.AppendResults(nil, nil, []engine.Result{{Allowed: true}}))
	if err := <-second; err != nil {
		t.Fatalf("the call to the new leader: %v", err)
	}
	select {
	case <-oldConn.dead:
		t.Fatal("the connection to the old leader closed with a call pending on it")
	default:
	}
	r1.reply(t, r1.id, StatusOK, codec.AppendResults(nil, nil, []engine.Result{{Allowed: true, Limit: 5}}))
	if err := <-first; err != nil || !res1[0].Allowed || res1[0].Limit != 5 {
		t.Fatalf("the call pending on the old leader: %v %+v, want its results", err, res1[0])
	}
	select {
	case <-oldConn.dead:
	case <-time.After(5 * time.Second):
		t.Fatal("the connection to the old leader stayed open after its last call was answered")
	}
}
