package cluster

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// fakeLeader accepts one follower connection and lets the test script the
// answers to its requests.
type fakeLeader struct {
	ln   net.Listener
	reqs chan fakeRequest
}

type fakeRequest struct {
	id  uint64
	ops []engine.Op
	c   net.Conn
}

func newFakeLeader(t *testing.T) *fakeLeader {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeLeader{ln: ln, reqs: make(chan fakeRequest, 16)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				br := bufio.NewReader(c)
				hello := make([]byte, len(fwdHello))
				if _, err := io.ReadFull(br, hello); err != nil || string(hello) != fwdHello {
					c.Close()
					return
				}
				for {
					p, err := readFrame(br, maxFwdRequest)
					if err != nil {
						c.Close()
						return
					}
					d := decoder{b: p}
					id := d.uvarint()
					d.uvarint()
					f.reqs <- fakeRequest{id: id, ops: d.ops(), c: c}
				}
			}()
		}
	}()
	return f
}

func (r fakeRequest) reply(t *testing.T, id uint64, status byte, body []byte) {
	p := binary.AppendUvarint(nil, id)
	p = append(p, status)
	p = append(p, body...)
	if _, err := r.c.Write(frame(p)); err != nil {
		t.Error(err)
	}
}

func TestForwardClient(t *testing.T) {
	timeout := 2 * time.Second
	ops := []engine.Op{decide("a", tokenRule, 1), decide("b", tokenRule, 1)}
	tests := []struct {
		name   string
		answer func(t *testing.T, r fakeRequest)
		check  func(err error, res []engine.Result) bool
	}{
		{"results", func(t *testing.T, r fakeRequest) {
			r.reply(t, r.id+100, fwdStatusOK, appendResults(nil, make([]engine.Result, 2))) // not ours: ignored
			r.reply(t, r.id, fwdStatusOK, appendResults(nil, []engine.Result{{Allowed: true, Limit: 5}, {Err: engine.ErrWrongType}}))
		}, func(err error, res []engine.Result) bool {
			return err == nil && res[0].Allowed && res[0].Limit == 5 && res[1].Err == engine.ErrWrongType
		}},
		{"error reply", func(t *testing.T, r fakeRequest) {
			r.reply(t, r.id, fwdStatusError, appendBytes(nil, []byte(ErrLoading.Error())))
		}, func(err error, _ []engine.Result) bool { return err == ErrLoading }},
		{"route again", func(t *testing.T, r fakeRequest) {
			r.reply(t, r.id, fwdStatusRetry, appendBytes(nil, []byte("not the leader")))
		}, func(err error, _ []engine.Result) bool { return err == errRetry }},
		{"connection lost after sending", func(t *testing.T, r fakeRequest) {
			r.c.Close()
		}, func(err error, _ []engine.Result) bool { return err == ErrOutcomeUnknown }},
		{"garbage results", func(t *testing.T, r fakeRequest) {
			r.reply(t, r.id, fwdStatusOK, []byte{7})
		}, func(err error, _ []engine.Result) bool { return err == ErrOutcomeUnknown }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			leader := newFakeLeader(t)
			c := &fwdClient{size: 1, timeout: timeout, log: testLogger(t)}
			defer c.close()
			res := make([]engine.Result, len(ops))
			errc := make(chan error, 1)
			deadline := time.NewTimer(timeout)
			defer deadline.Stop()
			go func() {
				errc <- c.forward(context.Background(), deadline.C, time.Now().Add(timeout), leader.ln.Addr().String(), ops, res)
			}()
			r := <-leader.reqs
			if len(r.ops) != 2 || string(r.ops[1].Key) != "b" {
				t.Fatalf("leader got %+v", r.ops)
			}
			tt.answer(t, r)
			if err := <-errc; !tt.check(err, res) {
				t.Fatalf("err %v, results %+v", err, res)
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
	c := &fwdClient{size: 1, timeout: time.Second, log: testLogger(t)}
	deadline := time.NewTimer(time.Second)
	defer deadline.Stop()
	err = c.forward(context.Background(), deadline.C, time.Now().Add(time.Second), addr, []engine.Op{decide("a", tokenRule, 1)}, make([]engine.Result, 1))
	if !errors.Is(err, errRetry) {
		t.Fatalf("err = %v, want errRetry", err)
	}
}

func TestForwardClientTimeout(t *testing.T) {
	leader := newFakeLeader(t) // reads, never answers
	c := &fwdClient{size: 1, timeout: 100 * time.Millisecond, log: testLogger(t)}
	defer c.close()
	deadline := time.NewTimer(100 * time.Millisecond)
	defer deadline.Stop()
	start := time.Now()
	err := c.forward(context.Background(), deadline.C, time.Now().Add(100*time.Millisecond), leader.ln.Addr().String(),
		[]engine.Op{decide("a", tokenRule, 1)}, make([]engine.Result, 1))
	if !errors.Is(err, ErrClusterDown) || time.Since(start) > time.Second {
		t.Fatalf("err = %v after %v", err, time.Since(start))
	}
	r := <-leader.reqs
	r.reply(t, r.id, fwdStatusOK, appendResults(nil, make([]engine.Result, 1))) // too late: dropped
}
