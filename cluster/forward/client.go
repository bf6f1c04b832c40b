package forward

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/outcome"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// The follower's side of forwarding (the protocol: frame.go): a pool of
// connections to the leader, each with a writer and a reader goroutine.

// errCallTimeout closes a connection on which a written call got no answer
// in time: it may be stuck behind TCP's retransmission backoff.
var errCallTimeout = errors.New("a call written on this connection got no answer in time")

// ErrBadReply is the outcome of a call whose results did not decode.
var ErrBadReply error = errcode.New(errcode.BadReply)

// ErrConnLost: the connection to the leader broke after the batch was
// written, and no re-send was answered in time. It may have applied.
var ErrConnLost error = errcode.New(errcode.ConnLost)

// ClientConfig is what a Client needs.
type ClientConfig struct {
	Group   int           // the Raft group whose leader the client forwards to
	Cluster string        // the cluster identity (cluster/peer/identity.go), "" for none
	Size    int           // connections in the pool (ForwardConns)
	Timeout time.Duration // ClusterTimeout, named by CLUSTERDOWN errors
	T       peer.Timeouts
	Network peer.Network // how it dials the leader (Config.Network)
	// Sentinels are the errors without details that a decoded code turns
	// back into (codec.Sentinels): cluster's, so that a forwarded error is
	// the very value (==) a local one is.
	Sentinels codec.Sentinels
}

// Client is a follower's pool of connections to the leader of its group.
type Client struct {
	cfg    ClientConfig
	prefix [8]byte // random: batch IDs differ across restarts
	seq    atomic.Uint64

	mu sync.Mutex // guards wrap, addr, conns, next, dialing, closed; never held while dialing or writing
	// wrap, in tests only, wraps every connection dialed (WrapConns).
	wrap    func(net.Conn) net.Conn
	addr    string
	conns   []*fwdConn
	next    int
	dialing bool // one dial at a time: a dead leader must not draw a herd
	closed  bool
}

// NewClient is a pool of cfg.Size connections.
func NewClient(cfg ClientConfig) *Client {
	c := &Client{cfg: cfg}
	_, _ = rand.Read(c.prefix[:]) // crypto/rand does not fail on Linux
	return c
}

// NewBatchID returns an ID no other batch of this or any other follower
// process uses (64 random bits, then a counter).
func (c *Client) NewBatchID() codec.BatchID {
	var id codec.BatchID
	copy(id[:8], c.prefix[:])
	binary.BigEndian.PutUint64(id[8:], c.seq.Add(1))
	return id
}

// Submit runs b's ops on the leader at b.Addr as batch b.ID. It returns
// TryNotApplied when they were certainly not applied, TryWritten when they
// were written and the connection broke before the answer (send again
// with the same ID), TryUnknown when the leader said it lost leadership
// while committing them, and otherwise their answer: a CLUSTERDOWN error
// when the deadline passed before they were written, an UNCERTAIN one
// when it passed after.
func (c *Client) Submit(ctx context.Context, deadline <-chan time.Time, b Batch) outcome.Attempt {
	addr, until, id, ops, results := b.Addr, b.Until, b.ID, b.Ops, b.Results
	conn, err := c.get(addr, until)
	if err != nil {
		return outcome.NotApplied(err)
	}
	call := newFwdCall(ops, results)
	if !conn.register(call) {
		return outcome.NotApplied(nil)
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
		return outcome.NotApplied(nil)
	case <-deadline:
		conn.forget(call.id)
		return outcome.Done(outcome.ClusterDownError(c.cfg.Timeout))
	case <-ctx.Done():
		conn.forget(call.id)
		return outcome.Done(fmt.Errorf("cluster: forward: %w", ctx.Err()))
	}
	var notAppliedErr error
	var why outcome.StopCause
	select {
	case <-call.Delivered():
		return call.Attempt()
	case <-deadline:
		why, notAppliedErr = outcome.StopDeadline, outcome.ClusterDownError(c.cfg.Timeout)
	case <-ctx.Done():
		why, notAppliedErr = outcome.StopCanceled, fmt.Errorf("cluster: forward: %w", ctx.Err())
	}
	switch st := call.GiveUp(); st {
	case outcome.Queued, outcome.HandedOver:
		conn.forget(call.id)
		if st == outcome.HandedOver && why == outcome.StopDeadline {
			// Written, unanswered: the leader may have applied it, and the
			// connection may be stuck (a dead network): drop it, so that
			// the next call dials afresh.
			conn.die(errCallTimeout)
		}
		return outcome.Done(outcome.GiveUpError(st == outcome.HandedOver, why, notAppliedErr, c.cfg.Timeout))
	}
	<-call.Delivered()
	return call.Attempt()
}

// errNoConn: no connection to the leader can carry a call now (a dial
// failed or is under way): the call is not sent, and routed again.
var errNoConn = errors.New("no connection to the leader now")

// get returns a live connection to addr, dialing one if the pool is not
// full; a pooled connection that has heard nothing for t.idle is pinged
// first, and dropped if it does not answer in t.ping.
func (c *Client) get(addr string, until time.Time) (*fwdConn, error) {
	for range c.cfg.Size + 1 {
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
func (c *Client) pick(addr string, until time.Time) (*fwdConn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, outcome.ErrShuttingDown
	}
	var old []*fwdConn
	if addr != c.addr {
		old, c.conns, c.addr = c.conns, nil, addr
	}
	if len(c.conns) >= c.cfg.Size || (c.dialing && len(c.conns) > 0) {
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

// GroupHello is what a connection of this client's group sends before
// the forwarding or control channel's hello: its cluster identity, and
// GroupHello for a group other than 0.
func (c *Client) GroupHello() []byte {
	hello := peer.ClusterHello(c.cfg.Cluster)
	if c.cfg.Group == 0 {
		return hello
	}
	return binary.AppendUvarint(append(hello, GroupHello...), uint64(c.cfg.Group))
}

// Dial opens a connection to a node's forward address: every dial of
// the forward port, forwarding's and the control channel's, goes through
// it.
func (c *Client) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	return c.cfg.Network.Dial(addr, timeout)
}

// dial opens a connection to a leader's forward address and says hello.
func (c *Client) dial(addr string, until time.Time) (net.Conn, error) {
	timeout := min(DialTimeout, max(time.Until(until), time.Millisecond))
	nc, err := c.Dial(addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("cluster: dial leader %s: %w", addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	_ = nc.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := nc.Write(append(c.GroupHello(), Hello...)); err != nil {
		nc.Close()
		return nil, fmt.Errorf("cluster: dial leader %s: %w", addr, err)
	}
	_ = nc.SetWriteDeadline(time.Time{})
	c.mu.Lock()
	wrap := c.wrap
	c.mu.Unlock()
	if wrap != nil {
		nc = wrap(nc)
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

func closeAll(conns []*fwdConn) {
	for _, conn := range conns {
		conn.c.Close()
	}
}

// WrapConns, in tests only, wraps every connection dialed from now on
// with wrap (to break one at a chosen moment) and drops the pooled ones,
// so that the next call dials.
func (c *Client) WrapConns(wrap func(net.Conn) net.Conn) {
	c.dropConns(func() { c.wrap = wrap })
}

// Close closes every connection; their pending calls fail.
func (c *Client) Close() {
	c.dropConns(func() { c.closed = true })
}

// dropConns runs change under c.mu, empties the pool and closes the
// connections it held.
func (c *Client) dropConns(change func()) {
	c.mu.Lock()
	change()
	conns := c.conns
	c.conns = nil
	c.mu.Unlock()
	closeAll(conns)
}
