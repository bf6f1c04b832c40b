package cluster

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// The follower's side of forwarding (the protocol: fwdframe.go): a pool of
// connections to the leader, each with a writer and a reader goroutine.

// fwdResendWindow bounds how long after its Execute began a follower
// re-sends a batch whose connection broke after it was written: well within
// the FSM's dedupWindow (dedup.go), even with leaders' clocks seconds apart.
const fwdResendWindow = 10 * time.Second

// errCallTimeout closes a connection on which a written call got no answer
// in time: it may be stuck behind TCP's retransmission backoff.
var errCallTimeout = errors.New("a call written on this connection got no answer in time")

// errBadReply is the outcome of a call whose results did not decode.
var errBadReply error = errcode.New(errcode.BadReply)

// errConnLost: the connection to the leader broke after the batch was
// written, and no re-send was answered in time. It may have applied.
var errConnLost error = errcode.New(errcode.ConnLost)

// fwdClient is a follower's pool of connections to the leader.
type fwdClient struct {
	group   int    // the Raft group whose leader this client forwards to
	cluster string // the cluster identity (identity.go), "" for none
	size    int
	timeout time.Duration // ClusterTimeout, named by CLUSTERDOWN errors
	t       peer.Timeouts
	log     *slog.Logger
	network peer.Network // how it dials the leader (Config.Network)
	prefix  [8]byte      // random: batch IDs differ across restarts
	seq     atomic.Uint64
	// wrap, in tests only, wraps every connection dialed (to break one at
	// a chosen moment).
	wrap func(net.Conn) net.Conn

	mu      sync.Mutex // guards addr, conns, next, dialing, closed; never held while dialing or writing
	addr    string
	conns   []*fwdConn
	next    int
	dialing bool // one dial at a time: a dead leader must not draw a herd
	closed  bool
}

// newFwdClient is a pool of size connections.
func newFwdClient(group, size int, timeout time.Duration, t peer.Timeouts, network peer.Network, log *slog.Logger) *fwdClient {
	c := &fwdClient{group: group, size: size, timeout: timeout, t: t, network: network, log: log}
	_, _ = rand.Read(c.prefix[:]) // crypto/rand does not fail on Linux
	return c
}

// newBatchID returns an ID no other batch of this or any other follower
// process uses (64 random bits, then a counter).
func (c *fwdClient) newBatchID() codec.BatchID {
	var id codec.BatchID
	copy(id[:8], c.prefix[:])
	binary.BigEndian.PutUint64(id[8:], c.seq.Add(1))
	return id
}

// fwdCall is one forwarded Execute call (or a ping: no ops): the request
// frame and the outcome its caller waits for (outcome.go), outQueued until
// the writer hands it over by writing it.
type fwdCall struct {
	outcome
	ops     []engine.Op // what the results answer (codec.DecodeResults)
	id      uint64
	payload []byte // the request frame's payload (peer.WriteFrame adds the length)
}

// newFwdCall is a call of ops whose results go to results (nil for a
// ping).
func newFwdCall(ops []engine.Op, results []engine.Result) *fwdCall {
	return &fwdCall{outcome: outcome{done: make(chan struct{}, 1), results: results}, ops: ops}
}

// fwdConn is one pooled connection.
type fwdConn struct {
	client   *fwdClient
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

// forward runs ops on the leader at addr as batch id. It returns
// tryNotApplied when they were certainly not applied, tryWritten when they
// were written and the connection broke before the answer (send again
// with the same id), tryUnknown when the leader said it lost leadership
// while committing them, and otherwise their answer: a CLUSTERDOWN error
// when the deadline passed before they were written, an UNCERTAIN one
// when it passed after.
func (c *fwdClient) forward(ctx context.Context, deadline <-chan time.Time, until time.Time, addr string, id codec.BatchID, ops []engine.Op, results []engine.Result) attempt {
	conn, err := c.get(addr, until)
	if err != nil {
		return notApplied(err)
	}
	call := newFwdCall(ops, results)
	if !conn.register(call) {
		return notApplied(nil)
	}
	ms := max(time.Until(until).Milliseconds(), 1)
	p := make([]byte, 0, codec.OpsSize(ops)+2*binary.MaxVarintLen64+len(id))
	p = binary.AppendUvarint(p, call.id)
	p = binary.AppendUvarint(p, uint64(ms))
	p = append(p, id[:]...)
	p = codec.AppendOps(p, ops)
	call.payload = p

	select {
	case conn.wq <- call:
	case <-conn.dead:
		conn.forget(call.id)
		return notApplied(nil)
	case <-deadline:
		conn.forget(call.id)
		return done(clusterDownError(c.timeout))
	case <-ctx.Done():
		conn.forget(call.id)
		return done(fmt.Errorf("cluster: forward: %w", ctx.Err()))
	}
	var notAppliedErr error
	var why stopCause
	select {
	case <-call.done:
		return call.res
	case <-deadline:
		why, notAppliedErr = stopDeadline, clusterDownError(c.timeout)
	case <-ctx.Done():
		why, notAppliedErr = stopCanceled, fmt.Errorf("cluster: forward: %w", ctx.Err())
	}
	switch st := call.giveUp(); st {
	case outQueued, outHandedOver:
		conn.forget(call.id)
		if st == outHandedOver && why == stopDeadline {
			// Written, unanswered: the leader may have applied it, and the
			// connection may be stuck (a dead network): drop it, so that
			// the next call dials afresh.
			conn.die(errCallTimeout)
		}
		return done(giveUpError(st == outHandedOver, why, notAppliedErr, c.timeout))
	}
	<-call.done
	return call.res
}

// errNoConn: no connection to the leader can carry a call now (a dial
// failed or is under way): the call is not sent, and routed again.
var errNoConn = errors.New("no connection to the leader now")

// get returns a live connection to addr, dialing one if the pool is not
// full; a pooled connection that has heard nothing for t.idle is pinged
// first, and dropped if it does not answer in t.ping.
func (c *fwdClient) get(addr string, until time.Time) (*fwdConn, error) {
	for range c.size + 1 {
		conn, err := c.pick(addr, until)
		if err != nil {
			return nil, err
		}
		if conn.healthy() {
			return conn, nil
		}
	}
	return nil, errNoConn
}

// pick returns a pooled connection to addr, or dials one if the pool is
// not full. A new address (a new leader) replaces the pool.
func (c *fwdClient) pick(addr string, until time.Time) (*fwdConn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrShuttingDown
	}
	var old []*fwdConn
	if addr != c.addr {
		old, c.conns, c.addr = c.conns, nil, addr
	}
	if len(c.conns) >= c.size || (c.dialing && len(c.conns) > 0) {
		conn := c.conns[c.next%len(c.conns)]
		c.next++
		c.mu.Unlock()
		retireAll(old)
		return conn, nil
	}
	if c.dialing {
		c.mu.Unlock()
		retireAll(old)
		return nil, errNoConn // another caller is dialing; look again shortly
	}
	c.dialing = true
	c.mu.Unlock()
	retireAll(old)

	nc, err := c.dial(addr, until)
	c.mu.Lock()
	c.dialing = false
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	if c.closed || c.addr != addr {
		c.mu.Unlock()
		nc.Close()
		return nil, errNoConn
	}
	conn := &fwdConn{client: c, c: nc, wq: make(chan *fwdCall, 1024), dead: make(chan struct{}), pending: make(map[uint64]*fwdCall)}
	conn.lastRecv.Store(time.Now().UnixNano())
	c.conns = append(c.conns, conn)
	c.mu.Unlock()
	go conn.writer()
	go conn.reader()
	return conn, nil
}

// groupHello is what a connection of this client's group sends before
// the forwarding or announcement hello: nothing for group 0.
func (c *fwdClient) groupHello() []byte {
	hello := clusterHello(c.cluster) // identity.go
	if c.group == 0 {
		return hello
	}
	return binary.AppendUvarint(append(hello, fwdGroupHello...), uint64(c.group))
}

// dialPeer opens a connection to a node's forward address: every dial of
// the forward port, forwarding's and the control channel's, goes through
// it.
func (c *fwdClient) dialPeer(addr string, timeout time.Duration) (net.Conn, error) {
	return c.network.Dial(addr, timeout)
}

// dial opens a connection to a leader's forward address and says hello.
func (c *fwdClient) dial(addr string, until time.Time) (net.Conn, error) {
	timeout := min(fwdDialTimeout, max(time.Until(until), time.Millisecond))
	nc, err := c.dialPeer(addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("cluster: dial leader %s: %w", addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	_ = nc.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := nc.Write(append(c.groupHello(), fwdHello...)); err != nil {
		nc.Close()
		return nil, fmt.Errorf("cluster: dial leader %s: %w", addr, err)
	}
	_ = nc.SetWriteDeadline(time.Time{})
	if c.wrap != nil {
		nc = c.wrap(nc)
	}
	return nc, nil
}

// retireAll retires the connections to a former leader: each closes once
// the calls written on it are answered (a leadership transfer answers
// them: with their results, or a retry), so that no call that may have
// applied is cut off and re-sent (a re-sent batch that had applied can
// only be answered UNCERTAIN).
func retireAll(conns []*fwdConn) {
	for _, conn := range conns {
		conn.retire()
	}
}

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

func closeAll(conns []*fwdConn) {
	for _, conn := range conns {
		conn.c.Close()
	}
}

// close closes every connection; their pending calls fail.
func (c *fwdClient) close() {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = nil
	c.mu.Unlock()
	closeAll(conns)
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
	t := conn.client.t
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
	case <-call.done:
		return call.res.reply()
	case <-t.C:
	}
	if call.giveUp() != outClaimed {
		conn.forget(call.id)
		return fmt.Errorf("no answer to a ping within %v", timeout)
	}
	<-call.done
	return call.res.reply()
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
		_ = conn.c.SetWriteDeadline(time.Now().Add(conn.client.t.Write))
		yielded := false
		for call != nil {
			// Mark it written before writing: once bytes may have left, the
			// outcome is unknown if the connection breaks.
			if call.handOver() {
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
				// their calls first (see coalescing in fwdframe.go).
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
			if call.claim(outQueued) {
				call.deliver(notApplied(nil))
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
		p, err := peer.ReadFrameInto(br, maxFwdResponse, buf)
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
		if call == nil || !call.claim(outHandedOver) {
			if retired {
				conn.die(errRetired)
				return
			}
			continue // its caller gave up
		}
		switch status {
		case fwdStatusOK:
			if err := codec.DecodeResults(d.B, call.ops, call.results, sentinels); err != nil {
				call.deliver(done(errBadReply))
				conn.die(err)
				return
			}
			call.deliver(done(nil))
		case fwdStatusRetry:
			call.deliver(notApplied(nil))
		default:
			err := d.CodedError(sentinels)
			if d.Err != nil {
				call.deliver(done(errBadReply))
				conn.die(d.Err)
				return
			}
			call.deliver(leaderError(err))
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
func leaderError(err error) attempt {
	switch {
	case errcode.Is(err, errcode.OutcomeUnknown):
		return attempt{kind: tryUnknown}
	case errcode.Is(err, errcode.LogWriteFailed):
		return notApplied(err)
	}
	return done(err)
}

// die closes the connection, removes it from the pool and fails every
// call waiting for a response: tryWritten for those written (the caller
// may send them again with the same batch ID), tryNotApplied for those
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
		if call.claim(outQueued) {
			call.deliver(notApplied(nil))
		} else if call.claim(outHandedOver) {
			call.deliver(attempt{kind: tryWritten})
		}
	}
}
