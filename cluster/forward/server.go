package forward

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/outcome"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/engine"
)

// The leader's side of forwarding (the protocol: frame.go): it accepts
// followers' connections and feeds their requests to the group commit.

// Group is one Raft group of a host as the forward port sees it: the
// node's local submit, in two steps, so that a connection's requests are
// queued in the order they arrived and waited for apart.
type Group interface {
	// Accept queues a forwarded batch into the group commit if this node
	// is the group's ready leader, its results to go to results. Otherwise
	// it returns no Pending and the status to answer (StatusRetry: not
	// applied, route again; StatusError) with its error.
	Accept(ctx context.Context, deadline <-chan time.Time, id codec.BatchID, ops []engine.Op, results []engine.Result) (Pending, byte, error)
	// Timeout caps the timeout a follower asks for (ClusterTimeout).
	Timeout() time.Duration
	// Timer returns a timer that fires after d; PutTimer takes it back
	// once nothing receives from it any more.
	Timer(d time.Duration) *time.Timer
	PutTimer(t *time.Timer)
	// ForPeers gives err, and the errors in results, the form the group's
	// followers know: while its cluster version is below this build's,
	// members of older releases may be the ones asking.
	ForPeers(err error, results []engine.Result) error
}

// Pending is a batch Accept queued: Wait waits for its outcome, until
// the deadline fires or ctx ends.
type Pending interface {
	Wait(ctx context.Context, deadline <-chan time.Time) outcome.Attempt
}

// Control serves a connection whose hello is not forwarding's (the hellos
// read, the connection's group named): the control channel's. It reports
// false when hello is none of its, and the connection is dropped.
type Control func(group int, hello string, c net.Conn, br *bufio.Reader) bool

// Server accepts forwarded batches for the groups of a host: a
// connection names its group in a hello of its own before the forwarding
// hello (GroupHello), or is group 0's.
type Server struct {
	groups  []Group // by group; set before serve starts
	control Control
	ln      net.Listener
	log     *slog.Logger
	// cluster is the cluster identity (cluster/peer/identity.go), "" for
	// none.
	cluster string

	mu     sync.Mutex // guards conns, closed
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // connection handlers
	// inflight counts the forwarded batches taken into a group commit and
	// not answered yet (Inflight).
	inflight atomic.Int64
}

// NewServer is the server of the forward port ln of a node of cluster
// (its identity, "" for none).
func NewServer(ln net.Listener, cluster string, log *slog.Logger) *Server {
	return &Server{ln: ln, log: log, cluster: cluster, conns: make(map[net.Conn]struct{})}
}

// Serve starts serving the host's groups (by group number) and hands the
// connections of other hellos to control.
func (s *Server) Serve(groups []Group, control Control) {
	s.groups, s.control = groups, control
	s.wg.Add(1)
	go s.serve()
}

// Inflight is the number of forwarded batches taken into a group commit
// and not answered yet (Host.Handover waits for none).
func (s *Server) Inflight() int64 { return s.inflight.Load() }

func (s *Server) serve() {
	defer s.wg.Done()
	peer.Serve(s.ln, s.log, "forward listener", s.isClosed, func(c net.Conn) bool {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return false
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.handle(c)
		return true
	})
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close stops accepting, closes every connection and waits for the
// handlers' reading loops to end.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// handle serves one follower connection: this goroutine reads requests and
// queues them, in order, into the group commit; a goroutine per request
// waits for its outcome; one writer sends the responses, coalescing them.
func (s *Server) handle(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	br := bufio.NewReaderSize(c, 64<<10)
	var hello [len(Hello)]byte
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := peer.ReadClusterHello(br, s.cluster); err != nil {
		s.log.Warn("forward listener: dropping a connection", "remote", c.RemoteAddr(), "err", err)
		return
	}
	_, err := io.ReadFull(br, hello[:])
	group := uint64(0)
	if err == nil && string(hello[:]) == GroupHello {
		if group, err = binary.ReadUvarint(br); err == nil {
			_, err = io.ReadFull(br, hello[:])
		}
	}
	if err != nil || group >= uint64(len(s.groups)) {
		s.log.Warn("forward listener: dropping a connection without the sluice hello or for an unknown group", "remote", c.RemoteAddr(), "group", group)
		return
	}
	n := s.groups[group]
	if string(hello[:]) != Hello {
		if s.control(int(group), string(hello[:]), c, br) {
			return
		}
		s.log.Warn("forward listener: dropping a connection without the sluice hello", "remote", c.RemoteAddr())
		return
	}
	_ = c.SetReadDeadline(time.Time{})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan []byte, 1024) // response payloads; the writer frames them
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		bw := bufio.NewWriterSize(c, 64<<10)
		for {
			var f []byte
			select {
			case f = <-out:
			case <-ctx.Done():
				return
			}
			// A follower that stops reading fails the connection instead of
			// holding this goroutine; generous (at least 10 s), since a
			// KEYS reply may be large, and TCP_USER_TIMEOUT catches a dead
			// network sooner.
			_ = c.SetWriteDeadline(time.Now().Add(max(n.Timeout(), 10*time.Second)))
			yielded := false
			for f != nil {
				if err := peer.WriteFrame(bw, f); err != nil {
					cancel()
					c.Close()
					return
				}
				select {
				case f = <-out:
				default:
					f = nil
				}
				if f == nil && !yielded {
					// Once per flush, let the request goroutines that are
					// runnable queue their responses first (see coalescing
					// in frame.go).
					yielded = true
					runtime.Gosched()
					select {
					case f = <-out:
					default:
					}
				}
			}
			if err := bw.Flush(); err != nil {
				cancel()
				c.Close()
				return
			}
		}
	}()
	var pending sync.WaitGroup
	for {
		p, err := peer.ReadFrame(br, MaxRequest)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
				s.log.Warn("forward listener: bad request", "remote", c.RemoteAddr(), "err", err)
			}
			break
		}
		d := codec.NewDecoder(p)
		id := d.Uvarint()
		timeout := time.Duration(d.Uvarint()) * time.Millisecond
		var bid codec.BatchID
		if len(d.B) < len(bid) && d.Err == nil {
			d.Fail("batch id")
		}
		if d.Err == nil {
			copy(bid[:], d.B)
			d.B = d.B[len(bid):]
		}
		ops := d.Ops()
		if d.Err == nil && len(d.B) != 0 {
			d.Err = fmt.Errorf("%w: stray bytes after the ops", codec.ErrMalformed)
		}
		if d.Err != nil {
			s.log.Warn("forward listener: malformed request", "remote", c.RemoteAddr(), "err", d.Err)
			break
		}
		if len(ops) == 0 {
			s.respond(ctx, out, n, id, StatusOK, nil, nil, nil)
			continue
		}
		timeout = min(max(timeout, time.Millisecond), n.Timeout())
		timer := n.Timer(timeout)
		results := make([]engine.Result, len(ops))
		req, status, err := n.Accept(ctx, timer.C, bid, ops, results)
		if req == nil {
			n.PutTimer(timer)
			s.respond(ctx, out, n, id, status, nil, nil, err)
			continue
		}
		pending.Add(1)
		s.inflight.Add(1)
		go func() {
			defer pending.Done()
			defer s.inflight.Add(-1)
			defer n.PutTimer(timer)
			switch a := req.Wait(ctx, timer.C); {
			case a.Kind == outcome.TryNotApplied:
				s.respond(ctx, out, n, id, StatusRetry, nil, nil, a.Reply())
			case a.Kind != outcome.TryDone || a.Err != nil:
				s.respond(ctx, out, n, id, StatusError, nil, nil, a.Reply())
			default:
				s.respond(ctx, out, n, id, StatusOK, ops, results, nil)
			}
		}()
	}
	// The connection is broken or closing: no answer can be delivered.
	// Stop the writer and the waiting goroutines (their requests stay in
	// the log's hands; the follower reports their outcome as unknown).
	cancel()
	pending.Wait()
	<-writerDone
}

// respond queues one response's payload, its errors in the form the
// group's followers know (Group.ForPeers).
func (s *Server) respond(ctx context.Context, out chan<- []byte, n Group, id uint64, status byte, ops []engine.Op, results []engine.Result, err error) {
	err = n.ForPeers(err, results)
	p := make([]byte, 0, 16+32*len(results))
	p = binary.AppendUvarint(p, id)
	p = append(p, status)
	if status == StatusOK {
		p = codec.AppendResults(p, ops, results)
	} else {
		p = codec.AppendError(p, err)
	}
	select {
	case out <- p:
	case <-ctx.Done():
	}
}
