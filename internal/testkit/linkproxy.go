package testkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Partitions.
//
// A test cluster has every node dial each peer (for Raft, and for
// forwarding to a leader) through a proxy of its own: one LinkProxy per
// ordered pair of nodes and per port. Node a learns them from its hidden
// --debug-dial-map flag, which maps b's real Raft and forward addresses to
// the proxies of (a, b). Cutting the link between a and b cuts the
// proxies of (a, b) and (b, a), and nothing else: a partition is any set
// of cut links (isolate one node, or cut one link and leave a bridge).
// The chaos suite (cmd/sluice-chaos/nodes.go) and cmd/sluice's partition
// tests build their clusters so.
//
// A cut link either drops (it goes silent: bytes already read wait, new
// connections hang, as when packets are lost, and everything resumes
// intact on heal), stalls (silent like drop, but on heal the connections
// that lived through it stay silent for good while new ones pass: what a
// long cut does to TCP, whose retransmission backoff then keeps an old
// connection quiet for tens of seconds after the network is back), or
// rejects (its connections are closed and new ones are refused, as when a
// host answers with resets).
//
// A proxy listens only while its link does not reject and the node behind
// it is up, so that a dial is refused exactly when it would be without the
// proxy. (A proxy that accepted and then closed would make the dialer
// believe its connection worked, and what it sent on it of unknown fate.)

// LinkMode is how a link behaves.
type LinkMode int

// The link modes.
const (
	// LinkUp passes every byte.
	LinkUp LinkMode = iota
	// LinkDrop goes silent; on heal every connection resumes intact.
	LinkDrop
	// LinkReject closes every connection and refuses new ones.
	LinkReject
	// LinkStall goes silent; on heal the connections that lived through
	// it stay silent for good while new ones pass.
	LinkStall
)

// String names the mode.
func (m LinkMode) String() string { return [...]string{"up", "drop", "reject", "stall"}[m] }

// LinkProxy forwards connections from one node to one port of another.
type LinkProxy struct {
	target string
	listen string // the proxy's address, kept while its listener comes and goes
	log    *slog.Logger

	mu   sync.Mutex
	ln   net.Listener // nil while not listening
	mode LinkMode
	down bool          // the node behind is down
	gate chan struct{} // closed unless the link drops
	// conns are the open connections, both sides; stuck are the client
	// sides of those that lived through a stall.
	conns map[net.Conn]struct{}
	stuck map[net.Conn]bool
	// closed is closed by close: it releases stuck connections.
	closed chan struct{}
	wg     sync.WaitGroup
}

// NewLinkProxy listens on a free port of 127.0.0.1 for connections to
// forward to target; log takes its debug messages.
func NewLinkProxy(target string, log *slog.Logger) (*LinkProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy for %s: %w", target, err)
	}
	gate := make(chan struct{})
	close(gate)
	p := &LinkProxy{target: target, listen: ln.Addr().String(), ln: ln, log: log, gate: gate,
		conns: map[net.Conn]struct{}{}, stuck: map[net.Conn]bool{}, closed: make(chan struct{})}
	go p.serve(ln)
	return p, nil
}

// Addr is the address nodes dial.
func (p *LinkProxy) Addr() string { return p.listen }

// serve accepts connections until ln closes.
func (p *LinkProxy) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

// syncListener listens, or stops, as the link and the target say. p.mu is
// held.
func (p *LinkProxy) syncListener() error {
	want := !p.down && p.mode != LinkReject
	switch {
	case !want && p.ln != nil:
		p.ln.Close()
		p.ln = nil
	case want && p.ln == nil:
		var err error
		for range 50 { // the old socket may linger a moment
			var ln net.Listener
			if ln, err = net.Listen("tcp", p.listen); err == nil {
				p.ln = ln
				go p.serve(ln)
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return fmt.Errorf("proxy %s: listen again: %w", p.listen, err)
	}
	return nil
}

// TargetDown stops listening: the node behind the proxy is down.
func (p *LinkProxy) TargetDown() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	_ = p.syncListener()
}

// TargetUp listens again, unless the link rejects.
func (p *LinkProxy) TargetUp() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
	return p.syncListener()
}

// Set changes the link's mode: dropping holds every byte until the link
// is up again; stalling too, except for the connections that lived
// through it; rejecting closes every connection and refuses new ones.
func (p *LinkProxy) Set(mode LinkMode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if mode == p.mode {
		return nil
	}
	if p.mode == LinkDrop || p.mode == LinkStall {
		close(p.gate) // release what waits (but stuck connections)
	}
	if mode == LinkDrop || mode == LinkStall {
		p.gate = make(chan struct{})
	}
	if mode == LinkStall {
		for c := range p.conns {
			p.stuck[c] = true
		}
	}
	p.mode = mode
	if mode == LinkReject {
		for c := range p.conns {
			c.Close()
		}
	}
	return p.syncListener()
}

// track registers c, or reports false when the link rejects.
func (p *LinkProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == LinkReject {
		return false
	}
	p.conns[c] = struct{}{}
	if p.mode == LinkStall {
		p.stuck[c] = true
	}
	return true
}

func (p *LinkProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	for _, c := range cs {
		delete(p.conns, c)
		delete(p.stuck, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// waitUp blocks while the link drops or stalls, until it heals or ctx
// ends; for a connection (its client side c) stuck by a stall, until ctx
// ends.
func (p *LinkProxy) waitUp(ctx context.Context, c net.Conn) bool {
	for {
		p.mu.Lock()
		gate, stuck := p.gate, p.stuck[c]
		p.mu.Unlock()
		if stuck {
			select {
			case <-ctx.Done():
			case <-p.closed:
			}
			return false
		}
		select {
		case <-gate:
			p.mu.Lock()
			stuck = p.stuck[c]
			p.mu.Unlock()
			if !stuck {
				return true
			}
		case <-ctx.Done():
			return false
		}
	}
}

func (p *LinkProxy) handle(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		client.Close()
		return
	}
	// The connection's context ends when either side closes. A dropping
	// link holds a new connection before it reaches the target.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !p.waitUp(ctx, client) {
		p.untrack(client)
		return
	}
	server, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		p.untrack(client)
		return
	}
	if !p.track(server) {
		p.untrack(client, server)
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	pump := func(dst, src net.Conn) {
		defer wg.Done()
		defer cancel()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if !p.waitUp(ctx, client) {
					return
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
					p.log.Debug("proxy read", "target", p.target, "err", err)
				}
				return
			}
		}
	}
	go pump(server, client)
	go pump(client, server)
	<-ctx.Done()
	p.untrack(client, server) // unblocks the other pump's Read
	wg.Wait()
}

// Close stops the proxy and every connection through it.
func (p *LinkProxy) Close() {
	select {
	case <-p.closed:
	default:
		close(p.closed)
	}
	_ = p.Set(LinkUp)
	p.mu.Lock()
	p.down = true
	_ = p.syncListener()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
