package cluster

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/peer"
)

// One Raft listener for every group of a host (docs/design.md, "Sharding").
//
// A host runs one Raft group per slot range, and every group's transport
// needs streams to the same peers. They share one listener: a stream a
// group other than 0 opens starts with muxMarker and the group number (a
// uvarint); a stream without the marker belongs to group 0, so a host with
// one group speaks exactly what a single node always spoke. Raft's own
// streams start with an RPC type byte (0 to 4 in raft v1.8), never the
// marker.
//
// The listener's accept loop only accepts: each connection's first bytes
// are read in a goroutine of its own, with a deadline, so a peer that
// connects and sends nothing (or a TLS handshake that stalls) holds up no
// other connection.

// muxMarker opens a stream of a group other than 0.
const muxMarker = 'G'

// muxHeaderTimeout bounds the wait for a new stream's first bytes.
const muxHeaderTimeout = 10 * time.Second

// groupMux accepts the streams of every group on one listener and hands
// each to its group's stream layer.
type groupMux struct {
	ln        net.Listener
	advertise net.Addr // nil: the listener's address
	network   peer.Network
	t         peer.Timeouts
	log       *slog.Logger
	layers    []*groupStream
	cluster   string // the cluster identity (cluster/peer/identity.go), "" for none

	mu     sync.Mutex // guards closed
	closed bool
	wg     sync.WaitGroup // the accept loop and header readers
}

// newGroupMux listens on bind, on network, for the streams of groups
// groups; cluster is the cluster identity its streams carry
// (cluster/peer/identity.go), "" for none.
func newGroupMux(network peer.Network, bind, advertise string, t peer.Timeouts, groups int, log *slog.Logger, cluster string) (*groupMux, error) {
	ln, err := network.Listen(bind)
	if err != nil {
		return nil, err
	}
	m := &groupMux{ln: ln, network: network, t: t, log: log, cluster: cluster}
	if m.advertise, err = peer.Advertise(ln, advertise); err != nil {
		ln.Close()
		return nil, err
	}
	for g := range groups {
		m.layers = append(m.layers, &groupStream{mux: m, group: g, conns: make(chan net.Conn), done: make(chan struct{})})
	}
	m.wg.Add(1)
	go m.serve()
	return m, nil
}

func (m *groupMux) addr() net.Addr {
	if m.advertise != nil {
		return m.advertise
	}
	return m.ln.Addr()
}

func (m *groupMux) serve() {
	defer m.wg.Done()
	peer.Serve(m.ln, m.log, "raft listener", m.isClosed, func(c net.Conn) bool {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			c.Close()
			return false
		}
		m.wg.Add(1)
		m.mu.Unlock()
		go m.route(c)
		return true
	})
}

func (m *groupMux) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// route reads a new stream's header and hands the stream to its group.
func (m *groupMux) route(c net.Conn) {
	defer m.wg.Done()
	_ = c.SetReadDeadline(time.Now().Add(muxHeaderTimeout))
	br := bufio.NewReaderSize(c, 128)
	if err := peer.ReadClusterHello(br, m.cluster); err != nil {
		m.log.Warn("raft listener: dropping a stream", "remote", c.RemoteAddr(), "err", err)
		c.Close()
		return
	}
	first, err := br.Peek(1)
	if err != nil {
		c.Close()
		return
	}
	group := 0
	if first[0] == muxMarker {
		_, _ = br.ReadByte()
		g, err := binary.ReadUvarint(br)
		if err != nil || g >= uint64(len(m.layers)) {
			m.log.Warn("raft listener: dropping a stream for an unknown group", "remote", c.RemoteAddr(), "group", g, "err", err)
			c.Close()
			return
		}
		group = int(g)
	}
	_ = c.SetReadDeadline(time.Time{})
	if err := m.layers[group].deliver(&bufferedConn{Conn: c, r: br}); err != nil {
		c.Close()
	}
}

// close stops accepting and waits for the header readers; each group's
// transport closes its own streams.
func (m *groupMux) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.ln.Close()
	for _, l := range m.layers {
		_ = l.Close()
	}
	m.wg.Wait()
}

// groupStream is one group's raft.StreamLayer on a groupMux.
type groupStream struct {
	mux   *groupMux
	group int
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

var errStreamClosed = errors.New("cluster: raft stream layer closed")

// deliver hands an accepted stream to the group's transport, or fails when
// the group's transport is closed.
func (s *groupStream) deliver(c net.Conn) error {
	select {
	case s.conns <- c:
		return nil
	case <-s.done:
		return errStreamClosed
	}
}

// Accept implements net.Listener.
func (s *groupStream) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, errStreamClosed
	}
}

// Close implements net.Listener: this group accepts no more streams (the
// shared listener stays open for the others until the mux closes).
func (s *groupStream) Close() error {
	s.once.Do(func() { close(s.done) })
	return nil
}

// Addr implements net.Listener: the host's advertised Raft address.
func (s *groupStream) Addr() net.Addr { return s.mux.addr() }

// Dial implements raft.StreamLayer: a peer connection that names the group
// before Raft's first byte.
func (s *groupStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := s.mux.network.Dial(string(address), timeout)
	if err != nil || (s.group == 0 && s.mux.cluster == "") {
		return c, err
	}
	hdr := peer.ClusterHello(s.mux.cluster)
	if s.group != 0 {
		hdr = append(hdr, muxHeader(s.group)...)
	}
	_ = c.SetWriteDeadline(time.Now().Add(max(timeout, s.mux.t.Dial)))
	if _, err := c.Write(hdr); err != nil {
		c.Close()
		return nil, fmt.Errorf("cluster: raft stream to %s: header: %w", address, err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}

// muxHeader is the header of a stream of group g (> 0).
func muxHeader(g int) []byte {
	return binary.AppendUvarint([]byte{muxMarker}, uint64(g))
}

// bufferedConn is a connection whose first bytes were read into r.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil
	}
	return c.Conn.Read(p)
}
