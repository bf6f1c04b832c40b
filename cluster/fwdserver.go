package cluster

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
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/engine"
)

// The leader's side of forwarding (the protocol: fwdframe.go): it accepts
// followers' connections and feeds their requests to the group commit.

// fwdServer accepts forwarded batches for the groups of a host: a
// connection names its group in a hello of its own before the forwarding
// hello (fwdGroupHello), or is group 0's.
type fwdServer struct {
	nodes []*Node // by group; set before serve starts
	ln    net.Listener
	log   *slog.Logger
	// cluster is the cluster identity (identity.go), "" for none.
	cluster string

	mu     sync.Mutex // guards conns, closed
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // connection handlers
	// inflight counts the forwarded batches taken into a group commit and
	// not answered yet (Host.Handover waits for none).
	inflight atomic.Int64
}

func (s *fwdServer) serve() {
	defer s.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if s.isClosed() {
				return
			}
			s.log.Warn("forward listener: accept failed", "err", err)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.handle(c)
	}
}

func (s *fwdServer) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// close stops accepting, closes every connection and waits for the
// handlers' reading loops to end.
func (s *fwdServer) close() {
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
func (s *fwdServer) handle(c net.Conn) {
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
	var hello [len(fwdHello)]byte
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := readClusterHello(br, s.cluster); err != nil {
		s.log.Warn("forward listener: dropping a connection", "remote", c.RemoteAddr(), "err", err)
		return
	}
	_, err := io.ReadFull(br, hello[:])
	group := uint64(0)
	if err == nil && string(hello[:]) == fwdGroupHello {
		if group, err = binary.ReadUvarint(br); err == nil {
			_, err = io.ReadFull(br, hello[:])
		}
	}
	if err != nil || group >= uint64(len(s.nodes)) {
		s.log.Warn("forward listener: dropping a connection without the sluice hello or for an unknown group", "remote", c.RemoteAddr(), "group", group)
		return
	}
	n := s.nodes[group]
	if string(hello[:]) == ctlHello {
		s.serveControl(n, c, br) // control.go
		return
	} else if m := legacyMethod(string(hello[:])); m != nil {
		s.serveLegacy(n, c, br, m) // legacy.go
		return
	} else if string(hello[:]) != fwdHello {
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
			_ = c.SetWriteDeadline(time.Now().Add(max(n.cfg.ClusterTimeout, 10*time.Second)))
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
					// in fwdframe.go).
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
		p, err := peer.ReadFrame(br, maxFwdRequest)
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
			s.respond(ctx, out, n, id, fwdStatusOK, nil, nil, nil)
			continue
		}
		timeout = min(max(timeout, time.Millisecond), n.cfg.ClusterTimeout)
		timer := n.timers.get(timeout)
		results := make([]engine.Result, len(ops))
		req, status, err := n.acceptForwarded(ctx, timer.C, bid, ops, results)
		if req == nil {
			n.timers.put(timer)
			s.respond(ctx, out, n, id, status, nil, nil, err)
			continue
		}
		pending.Add(1)
		s.inflight.Add(1)
		go func() {
			defer pending.Done()
			defer s.inflight.Add(-1)
			defer n.timers.put(timer)
			switch a := n.batcher.wait(ctx, timer.C, req); {
			case a.kind == tryNotApplied:
				s.respond(ctx, out, n, id, fwdStatusRetry, nil, nil, a.reply())
			case a.kind != tryDone || a.err != nil:
				s.respond(ctx, out, n, id, fwdStatusError, nil, nil, a.reply())
			default:
				s.respond(ctx, out, n, id, fwdStatusOK, ops, results, nil)
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

// respond queues one response's payload.
// While the group's cluster version is below this build's, members of
// older releases may be the followers asking: errors they would not know
// are sent as ones they do (errorsFor, version.go).
func (s *fwdServer) respond(ctx context.Context, out chan<- []byte, n *Node, id uint64, status byte, ops []engine.Op, results []engine.Result, err error) {
	if cv := n.fsm.clusterVersion(); cv < SupportedVersion {
		err = errorFor(err, cv)
		errorsFor(results, cv)
	}
	p := make([]byte, 0, 16+32*len(results))
	p = binary.AppendUvarint(p, id)
	p = append(p, status)
	if status == fwdStatusOK {
		p = codec.AppendResults(p, ops, results)
	} else {
		p = codec.AppendError(p, err)
	}
	select {
	case out <- p:
	case <-ctx.Done():
	}
}
