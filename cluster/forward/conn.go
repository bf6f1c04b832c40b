package forward

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/outcome"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// A pooled connection of the follower's client (client.go): its calls,
// writer, reader and end.

// fwdCall is one forwarded Execute call (or a ping: no ops): the request
// frame and the outcome its caller waits for (cluster/outcome), Queued
// until the writer hands it over by writing it.
type fwdCall struct {
	outcome.Outcome
	ops     []engine.Op // what the results answer (codec.DecodeResults)
	id      uint64
	payload []byte // the request frame's payload (peer.WriteFrame adds the length)
}

// newFwdCall is a call of ops whose results go to results (nil for a
// ping).
func newFwdCall(ops []engine.Op, results []engine.Result) *fwdCall {
	call := &fwdCall{ops: ops}
	call.Reset(results)
	return call
}

// fwdConn is one pooled connection.
type fwdConn struct {
	client   *Client
	c        net.Conn
	wq       chan *fwdCall
	dead     chan struct{}
	lastRecv atomic.Int64 // when a frame last arrived (or the dial), Unix ns

	mu sync.Mutex // guards pending, nextID, err, retiring
	// pending is the connection's waiter list, keyed by call id (etcd's
	// pkg/wait): register before the call is handed to the writer, the
	// reader takes the call its response names. One list per connection,
	// not one per client: die fails exactly the calls written on it and
	// retire counts them, and the pool's connections share no lock.
	pending  map[uint64]*fwdCall
	nextID   uint64
	err      error // why the connection died
	retiring bool  // the leader changed: close once no call is pending
}

// errRetired closes a connection to a former leader once the calls
// written on it were answered.
var errRetired = errors.New("the leader changed and every call on this connection was answered")

// retire marks conn to close once no call is pending on it, now if none
// is. A call that gets no answer meets its deadline, which closes conn.
func (conn *fwdConn) retire() {
	conn.mu.Lock()
	conn.retiring = true
	idle := len(conn.pending) == 0
	conn.mu.Unlock()
	if idle {
		conn.die(errRetired)
	}
}

// retireIfIdle closes a retiring connection with no call pending.
func (conn *fwdConn) retireIfIdle() {
	conn.mu.Lock()
	idle := conn.retiring && len(conn.pending) == 0
	conn.mu.Unlock()
	if idle {
		conn.die(errRetired)
	}
}

// register gives call an id on conn and makes it pending; false when the
// connection is dead.
func (conn *fwdConn) register(call *fwdCall) bool {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	if conn.err != nil {
		return false
	}
	conn.nextID++
	call.id = conn.nextID
	conn.pending[call.id] = call
	return true
}

// forget drops a call its caller gave up on.
func (conn *fwdConn) forget(id uint64) {
	conn.mu.Lock()
	delete(conn.pending, id)
	conn.mu.Unlock()
	conn.retireIfIdle()
}

// healthy reports whether conn may carry a call: it heard from the leader
// within t.idle, or it answers a ping within t.ping. A connection that
// fails the ping is dropped.
func (conn *fwdConn) healthy() bool {
	t := conn.client.cfg.T
	if time.Since(time.Unix(0, conn.lastRecv.Load())) < t.Idle {
		return true
	}
	if err := conn.ping(t.Ping); err != nil {
		conn.die(fmt.Errorf("health check: %w", err))
		return false
	}
	return true
}

// ping sends a request without ops, which the leader answers at once.
func (conn *fwdConn) ping(timeout time.Duration) error {
	call := newFwdCall(nil, nil)
	if !conn.register(call) {
		return errors.New("connection closed")
	}
	var id codec.BatchID
	p := binary.AppendUvarint(nil, call.id)
	p = binary.AppendUvarint(p, uint64(timeout.Milliseconds()))
	p = append(p, id[:]...)
	p = codec.AppendOps(p, nil)
	call.payload = p
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case conn.wq <- call:
	case <-conn.dead:
		return errors.New("connection closed")
	case <-t.C:
		conn.forget(call.id)
		return fmt.Errorf("no room to send a ping within %v", timeout)
	}
	select {
	case <-call.Delivered():
		return call.Attempt().Reply()
	case <-t.C:
	}
	if call.GiveUp() != outcome.Claimed {
		conn.forget(call.id)
		return fmt.Errorf("no answer to a ping within %v", timeout)
	}
	<-call.Delivered()
	return call.Attempt().Reply()
}

// writer writes queued calls, coalescing everything queued into one flush,
// each flush within t.write (a leader that stops reading, or a dead
// network with full buffers, fails the connection instead of blocking it).
func (conn *fwdConn) writer() {
	bw := bufio.NewWriterSize(conn.c, 64<<10)
	for {
		var call *fwdCall
		select {
		case call = <-conn.wq:
		case <-conn.dead:
			conn.failQueued()
			return
		}
		_ = conn.c.SetWriteDeadline(time.Now().Add(conn.client.cfg.T.Write))
		yielded := false
		for call != nil {
			// Mark it written before writing: once bytes may have left, the
			// outcome is unknown if the connection breaks.
			if call.HandOver() {
				if err := peer.WriteFrame(bw, call.payload); err != nil {
					conn.die(err)
					conn.failQueued()
					return
				}
			}
			select {
			case call = <-conn.wq:
			default:
				call = nil
			}
			if call == nil && !yielded {
				// Once per flush, let the callers that are runnable queue
				// their calls first (see coalescing in frame.go).
				yielded = true
				runtime.Gosched()
				select {
				case call = <-conn.wq:
				default:
				}
			}
		}
		if err := bw.Flush(); err != nil {
			conn.die(err)
			conn.failQueued()
			return
		}
	}
}

// failQueued fails the calls still waiting to be written: not applied.
func (conn *fwdConn) failQueued() {
	for {
		select {
		case call := <-conn.wq:
			conn.forget(call.id)
			if call.Claim(outcome.Queued) {
				call.Deliver(outcome.NotApplied(nil))
			}
		default:
			return
		}
	}
}

// reader matches responses to calls by id.
func (conn *fwdConn) reader() {
	br := bufio.NewReaderSize(conn.c, 64<<10)
	// Responses are read into one buffer: codec.DecodeResults and CodedError
	// copy what they keep (keys, error details) out of the frame.
	var buf []byte
	for {
		p, err := peer.ReadFrameInto(br, MaxResponse, buf)
		if cap(p) <= 64<<10 && cap(p) > cap(buf) {
			buf = p[:0]
		}
		if err != nil {
			conn.die(err)
			return
		}
		conn.lastRecv.Store(time.Now().UnixNano())
		d := codec.NewDecoder(p)
		id := d.Uvarint()
		status := d.Byte()
		if d.Err != nil {
			conn.die(d.Err)
			return
		}
		conn.mu.Lock()
		call := conn.pending[id]
		delete(conn.pending, id)
		retired := conn.retiring && len(conn.pending) == 0
		conn.mu.Unlock()
		if call == nil || !call.Claim(outcome.HandedOver) {
			if retired {
				conn.die(errRetired)
				return
			}
			continue // its caller gave up
		}
		switch status {
		case StatusOK:
			if err := codec.DecodeResults(d.B, call.ops, call.Results(), conn.client.cfg.Sentinels); err != nil {
				call.Deliver(outcome.Done(ErrBadReply))
				conn.die(err)
				return
			}
			call.Deliver(outcome.Done(nil))
		case StatusRetry:
			call.Deliver(outcome.NotApplied(nil))
		default:
			err := d.CodedError(conn.client.cfg.Sentinels)
			if d.Err != nil {
				call.Deliver(outcome.Done(ErrBadReply))
				conn.die(d.Err)
				return
			}
			call.Deliver(leaderError(err))
		}
		if retired {
			conn.die(errRetired) // the last call of a former leader's connection
			return
		}
	}
}

// leaderError is the attempt a leader's error answer stands for: it lost
// its leadership while committing the batch (OutcomeUnknown: it may have
// applied; send it again with the same ID), it could not write its log
// (LogWriteFailed: not applied; route it again, to the next leader), or
// the batch's reply.
func leaderError(err error) outcome.Attempt {
	switch {
	case errcode.Is(err, errcode.OutcomeUnknown):
		return outcome.Attempt{Kind: outcome.TryUnknown}
	case errcode.Is(err, errcode.LogWriteFailed):
		return outcome.NotApplied(err)
	}
	return outcome.Done(err)
}

// die closes the connection, removes it from the pool and fails every
// call waiting for a response: TryWritten for those written (the caller
// may send them again with the same batch ID), TryNotApplied for those
// not.
func (conn *fwdConn) die(err error) {
	conn.mu.Lock()
	if conn.err != nil {
		conn.mu.Unlock()
		return
	}
	conn.err = err
	pending := conn.pending
	conn.pending = make(map[uint64]*fwdCall)
	conn.mu.Unlock()
	close(conn.dead)
	conn.c.Close()

	c := conn.client
	c.mu.Lock()
	for i, x := range c.conns {
		if x == conn {
			c.conns = append(c.conns[:i], c.conns[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	for _, call := range pending {
		if call.Claim(outcome.Queued) {
			call.Deliver(outcome.NotApplied(nil))
		} else if call.Claim(outcome.HandedOver) {
			call.Deliver(outcome.Attempt{Kind: outcome.TryWritten})
		}
	}
}
