// Package memnet is a network in memory for in-process cluster tests: it
// satisfies cluster/peer's Network (Listen, Dial) without a socket, so that
// the tests build nodes with the binary's one constructor (NewHost), as
// hashicorp/raft's MakeCluster runs over its InmemTransport
// (docs/design.md, "One constructor").
package memnet

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// Inmem is a network in memory, for in-process tests: an address book of
// listeners, and connections made of a pair of bounded buffers
// (pipe.go: as a socket's, with deadlines). Each node gets its own view (Node), so that a test can cut
// the links from one node to an address (Cut) and heal them (Heal), as
// hashicorp/raft's InmemTransport does with Disconnect and Connect. It
// touches no socket: addresses are only names in the book (host:port with
// an IP host; port 0 picks a free one).
type Inmem struct {
	mu        sync.Mutex
	listeners map[string]*inmemListener
	cut       map[inmemLink]bool
	pipes     map[*inmemPipe]struct{}
	nextPort  int
}

// inmemLink is the direction a test cuts: a node's dials to an address.
type inmemLink struct{ from, to string }

// inmemPipe is one connection: both ends, and the link it was dialed on.
type inmemPipe struct {
	link inmemLink
	a, b net.Conn
}

// NewInmem returns an empty in-memory network.
func NewInmem() *Inmem {
	return &Inmem{
		listeners: make(map[string]*inmemListener),
		cut:       make(map[inmemLink]bool),
		pipes:     make(map[*inmemPipe]struct{}),
		nextPort:  20000,
	}
}

// Node returns the view of the node called name: what it listens on is
// in the shared book, and its dials go from name (Cut).
func (m *Inmem) Node(name string) Node { return Node{m: m, name: name} }

// Cut makes the dials of node from to address to fail, and closes the
// connections from dialed to it (both their ends), until Heal. The other
// direction (to's node dialing from's addresses) is a link of its own.
func (m *Inmem) Cut(from, to string) {
	m.mu.Lock()
	m.cut[inmemLink{from, to}] = true
	var doomed []*inmemPipe
	for p := range m.pipes {
		if p.link == (inmemLink{from, to}) {
			doomed = append(doomed, p)
		}
	}
	m.mu.Unlock()
	for _, p := range doomed {
		p.close()
	}
}

// Heal undoes Cut(from, to).
func (m *Inmem) Heal(from, to string) {
	m.mu.Lock()
	delete(m.cut, inmemLink{from, to})
	m.mu.Unlock()
}

func (p *inmemPipe) close() {
	p.a.Close()
	p.b.Close()
}

// Node is one node's view of an Inmem network: cluster/peer's Network
// (what it listens on is in the shared book, its dials go from its name).
type Node struct {
	m    *Inmem
	name string
}

// Listen implements cluster/peer's Network.
func (n Node) Listen(addr string) (net.Listener, error) {
	m := n.m
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(host)
	port, err := strconv.Atoi(ps)
	if ip == nil || err != nil {
		return nil, &inmemError{"listen", addr, "want an IP and a port"}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if port == 0 {
		for {
			port = m.nextPort
			m.nextPort++
			if _, taken := m.listeners[net.JoinHostPort(host, strconv.Itoa(port))]; !taken {
				break
			}
		}
	}
	key := net.JoinHostPort(host, strconv.Itoa(port))
	if _, taken := m.listeners[key]; taken {
		return nil, &inmemError{"listen", key, "address already in use"}
	}
	l := &inmemListener{m: m, key: key, addr: &net.TCPAddr{IP: ip, Port: port},
		conns: make(chan net.Conn, 64), done: make(chan struct{})}
	m.listeners[key] = l
	return l, nil
}

// Dial implements cluster/peer's Network.
func (n Node) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	m := n.m
	link := inmemLink{n.name, addr}
	m.mu.Lock()
	if m.cut[link] {
		m.mu.Unlock()
		return nil, &inmemError{"dial", addr, "link cut"}
	}
	l := m.listeners[addr]
	if l == nil {
		m.mu.Unlock()
		return nil, &inmemError{"dial", addr, "connection refused"}
	}
	a, b := newPipePair()
	p := &inmemPipe{link: link}
	p.a = &inmemConn{Conn: a, m: m, p: p, local: inmemAddr(n.name), remote: l.addr}
	p.b = &inmemConn{Conn: b, m: m, p: p, local: l.addr, remote: inmemAddr(n.name)}
	m.pipes[p] = struct{}{}
	// Under the lock, so that a Close (which takes the listener out of
	// the book first, then closes what it did not accept) never leaves
	// a connection behind; only a full backlog waits.
	select {
	case l.conns <- p.b:
		m.mu.Unlock()
		return p.a, nil
	default:
	}
	m.mu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case l.conns <- p.b:
		return p.a, nil
	case <-l.done:
		p.close()
		return nil, &inmemError{"dial", addr, "connection refused"}
	case <-t.C:
		p.close()
		return nil, &inmemError{"dial", addr, "timeout"}
	}
}

// inmemAddr is the address of a node's dialing end.
type inmemAddr string

func (a inmemAddr) Network() string { return "inmem" }
func (a inmemAddr) String() string  { return string(a) }

// inmemConn is one end of a pipe, which forgets the pipe when closed.
type inmemConn struct {
	net.Conn
	m             *Inmem
	p             *inmemPipe
	local, remote net.Addr
}

func (c *inmemConn) LocalAddr() net.Addr  { return c.local }
func (c *inmemConn) RemoteAddr() net.Addr { return c.remote }

func (c *inmemConn) Close() error {
	c.m.mu.Lock()
	delete(c.m.pipes, c.p)
	c.m.mu.Unlock()
	return c.Conn.Close()
}

type inmemListener struct {
	m     *Inmem
	key   string
	addr  *net.TCPAddr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

// Accept implements net.Listener.
func (l *inmemListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener: the address is free again, and the
// connections not accepted yet are closed.
func (l *inmemListener) Close() error {
	l.once.Do(func() {
		l.m.mu.Lock()
		if l.m.listeners[l.key] == l {
			delete(l.m.listeners, l.key)
		}
		l.m.mu.Unlock()
		close(l.done)
		for {
			select {
			case c := <-l.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}

// Addr implements net.Listener.
func (l *inmemListener) Addr() net.Addr { return l.addr }

// inmemError is a failed listen or dial on an Inmem network (nothing
// listens, a cut link, an address in use).
type inmemError struct{ op, addr, why string }

func (e *inmemError) Error() string { return fmt.Sprintf("inmem %s %s: %s", e.op, e.addr, e.why) }
