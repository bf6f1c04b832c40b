package resp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/slots"
	"github.com/sluice-rl/sluice/rls"
)

// Config is the RESP server's configuration. Zero values take the defaults
// named on each field.
type Config struct {
	// RequirePass, when set, makes clients AUTH before other commands.
	RequirePass string
	// EnableDebug allows the DEBUG command (the test clock).
	EnableDebug bool
	// Limits are the protocol limits enforced before a request is parsed.
	Limits Limits
	// MaxKeyLen bounds key length in bytes (default 1024).
	MaxKeyLen int
	// MaxLogLimit bounds RL.LOG's limit (default 100000).
	MaxLogLimit int64
	// MaxValueLen bounds a string key's value in bytes (default 512,
	// engine.DefaultMaxValueLen); the engine must have the same bound.
	MaxValueLen int
	// MaxClients bounds connected clients (default 10000).
	MaxClients int
	// Persistent says whether state survives a restart (INFO and CONFIG
	// GET appendonly report it).
	Persistent bool
	// AppendFsync is the durability mode ("always", "everysec" or "no"),
	// reported by INFO persistence and CONFIG GET appendfsync. Without
	// Persistent nothing is written to disk and both report "no".
	AppendFsync string
	// LogStore names the store of the replicated log on disk ("bolt",
	// "wal"), reported by INFO persistence; "" when not Persistent.
	LogStore string
	// Version is reported by INFO as sluice_version.
	Version string
	// GitSHA1 and GitDirty are the commit the binary was built from and
	// whether the tree had changes, reported by INFO as sluice_git_sha1
	// and sluice_git_dirty (Redis's redis_git_sha1 and redis_git_dirty);
	// "" reports 00000000.
	GitSHA1  string
	GitDirty bool
	// Logger receives the server's logs (default slog.Default()).
	Logger *slog.Logger
	// Engine, when set, is the engine behind the executor: INFO memory and
	// the metrics report its keys, accounted memory and limits.
	Engine EngineView
	// Tracker, when set, enables CLIENT TRACKING. It must also be the
	// Watcher of the engine the executor applies operations to (on every
	// node of a cluster, each its own), which tells it of changed keys.
	Tracker *Tracker
	// Cluster makes a node whose executor is a ClusterAdmin speak the
	// Redis Cluster protocol (CLUSTER SLOTS and the rest, clustercmd.go);
	// without it CLUSTER replies that cluster support is disabled.
	Cluster bool
	// Redirect, on a Cluster node, answers a keyed command for slots this
	// node does not lead with MOVED to their leader instead of forwarding it.
	Redirect bool
	// RLS, when set, is Envoy's rate limit service: RL.CHECK decides with
	// it, RL.RULES lists and reloads its rules, INFO has its rls section.
	RLS *rls.Service
}

// appendFsync is the durability mode to report: "no" when nothing is
// written to disk.
func (c *Config) appendFsync() string {
	if !c.Persistent || c.AppendFsync == "" {
		return "no"
	}
	return c.AppendFsync
}

// logStore is the log store to report: "none" when nothing is on disk.
func (c *Config) logStore() string {
	if !c.Persistent || c.LogStore == "" {
		return "none"
	}
	return c.LogStore
}

func (c *Config) setDefaults() {
	if c.Limits == (Limits{}) {
		c.Limits = DefaultLimits()
	}
	if c.MaxKeyLen <= 0 {
		c.MaxKeyLen = 1024
	}
	if c.MaxLogLimit <= 0 {
		c.MaxLogLimit = 100000
	}
	if c.MaxValueLen <= 0 {
		c.MaxValueLen = engine.DefaultMaxValueLen
	}
	if c.MaxClients <= 0 {
		c.MaxClients = 10000
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server is a RESP server: it parses commands into engine operations and
// hands them to its Executor, a whole pipeline at a time.
//
// Lock order: Server.mu (the client registry) before client.mu (a client's
// name fields). No other lock of this package is held while calling the
// Executor. The Tracker's locks (tracking.go) are leaves below the engine's
// shard locks; lockedConn's write mutex is taken with no other lock held.
type Server struct {
	cfg      Config
	exec     Executor
	admin    ClusterAdmin // nil unless exec is a cluster node
	starter  Starter      // nil unless exec takes a while to start
	commands map[string]*command
	started  time.Time
	// slotTable maps slots to Raft groups (ClusterAdmin.Groups of them);
	// clusterRoute consults it.
	slotTable slots.Table
	clusterOn bool // cfg.Cluster with a ClusterAdmin executor

	mu        sync.Mutex
	clients   map[*client]struct{}
	listeners []listener // guarded by mu
	shut      bool       // Close was called; guarded by mu

	metrics *serverMetrics // metrics.go

	// draining: Drain was called; connections end once their commands
	// are answered (serveConn).
	draining atomic.Bool

	nextID        atomic.Int64
	connected     atomic.Int64
	connsTotal    atomic.Int64
	rejectedConns atomic.Int64
	commandsTotal atomic.Int64
}

// NewServer returns a server that executes commands with exec.
func NewServer(cfg Config, exec Executor) *Server {
	cfg.setDefaults()
	s := &Server{
		cfg:     cfg,
		exec:    exec,
		started: time.Now(),
		clients: make(map[*client]struct{}),
	}
	s.admin, _ = exec.(ClusterAdmin)
	s.starter, _ = exec.(Starter)
	s.clusterOn = cfg.Cluster && s.admin != nil
	groups := 1
	if s.admin != nil {
		groups = max(s.admin.Groups(), 1)
	}
	var err error
	if s.slotTable, err = slots.Even(groups); err != nil {
		s.slotTable, _ = slots.Even(1) // one group: cannot fail
	}
	s.commands = buildCommandTable(s.admin != nil, s.clusterOn)
	s.metrics = newServerMetrics(s)
	return s
}

// listener is one address the server accepts connections on.
type listener struct {
	ln  net.Listener // the plain listener Serve or ServeTLS was given
	tls bool
}

// Serve accepts connections on ln until Close. Each connection's requests
// are read by its parser (parser.go).
// A server may serve several listeners at once (Serve and ServeTLS, each on
// its goroutine); Close stops them all.
func (s *Server) Serve(ln net.Listener) error {
	return s.serve(ln, ln, false)
}

// ServeTLS is Serve over TLS: it accepts TLS connections on ln (a plain
// TCP listener) with cfg. The handshake runs on the connection's own
// goroutine, and the parser reads the decrypted bytes.
func (s *Server) ServeTLS(ln net.Listener, cfg *tls.Config) error {
	return s.serve(ln, tls.NewListener(ln, cfg), true)
}

// Accept's back-off after an error other than the listener's close (such
// as too many open files), as net/http's.
const (
	minAcceptDelay = 5 * time.Millisecond
	maxAcceptDelay = time.Second
)

func (s *Server) serve(raw, ln net.Listener, isTLS bool) error {
	s.mu.Lock()
	if s.shut {
		s.mu.Unlock()
		raw.Close()
		return nil
	}
	s.listeners = append(s.listeners, listener{ln: raw, tls: isTLS})
	s.mu.Unlock()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			shut := s.shut
			s.mu.Unlock()
			if shut || errors.Is(err, net.ErrClosed) {
				return nil
			}
			delay = min(max(2*delay, minAcceptDelay), maxAcceptDelay)
			s.cfg.Logger.Warn("accept failed; retrying", "addr", raw.Addr(), "err", err, "delay", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		if c := s.accept(nc); c != nil {
			go s.serveConn(c)
		}
	}
}

// Addr is the address of the first plain (not TLS) listener, or of the
// first listener when all are TLS (nil before Serve).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.listeners {
		if !l.tls {
			return l.ln.Addr()
		}
	}
	if len(s.listeners) > 0 {
		return s.listeners[0].ln.Addr()
	}
	return nil
}

// TLSAddr is the address of the first TLS listener (nil when none).
func (s *Server) TLSAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.listeners {
		if l.tls {
			return l.ln.Addr()
		}
	}
	return nil
}

// Drain stops accepting connections and ends every client connection
// gracefully: a connection finishes the commands it has read (their
// replies are written) and is closed when it would wait for more, which an
// idle one does at once. It returns once every connection has ended, or
// with ctx's error (Close then closes those left).
func (s *Server) Drain(ctx context.Context) error {
	conns, err := s.shutListeners(true)
	// A read deadline in the past: a connection blocked reading (idle, or
	// between commands) returns at once, a busy one when it next reads,
	// after writing its replies. Commands already read are served.
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now())
	}
	for s.connected.Load() > 0 {
		select {
		case <-ctx.Done():
			return errors.Join(err, fmt.Errorf("drain RESP server: %w", ctx.Err()))
		case <-time.After(5 * time.Millisecond):
		}
	}
	return err
}

// shutListeners stops accepting connections (once: a second call closes
// nothing more), marks the server draining when drain is set, and returns
// the connections open at that moment.
func (s *Server) shutListeners(drain bool) ([]net.Conn, error) {
	s.mu.Lock()
	lns := s.listeners
	if s.shut {
		lns = nil // closed already
	}
	s.shut = true
	if drain {
		s.draining.Store(true)
	}
	conns := make([]net.Conn, 0, len(s.clients))
	for c := range s.clients {
		conns = append(conns, c.nc)
	}
	s.mu.Unlock()
	var err error
	for _, l := range lns {
		if e := l.ln.Close(); e != nil && !errors.Is(e, net.ErrClosed) {
			err = errors.Join(err, e)
		}
	}
	return conns, err
}

// Close stops accepting connections and closes every client connection.
// Commands already handed to the executor finish there; their replies may
// not reach clients.
func (s *Server) Close(ctx context.Context) error {
	conns, err := s.shutListeners(false)
	for _, c := range conns {
		_ = c.Close()
	}
	// Wait for the connection goroutines to notice.
	for s.connected.Load() > 0 {
		select {
		case <-ctx.Done():
			return errors.Join(err, fmt.Errorf("close RESP server: %w", ctx.Err()))
		case <-time.After(5 * time.Millisecond):
		}
	}
	return err
}

// accept registers a new connection and returns its state, or refuses it
// past MaxClients with Redis's error (and returns nil).
func (s *Server) accept(nc net.Conn) *client {
	s.connsTotal.Add(1)
	if s.connected.Add(1) > int64(s.cfg.MaxClients) {
		s.connected.Add(-1)
		s.rejectedConns.Add(1)
		// Both ways: on a TLS listener the write runs the handshake, which
		// must not hold the accept loop on a client that sends nothing.
		_ = nc.SetDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = nc.Write([]byte("-" + msgMaxClients.Text() + "\r\n"))
		_ = nc.Close()
		return nil
	}
	lc := &lockedConn{Conn: nc}
	c := &client{
		id:         s.nextID.Add(1),
		nc:         lc,
		rd:         newReqParser(lc, s.cfg.Limits),
		addr:       nc.RemoteAddr().String(),
		proto:      2,
		shownProto: 2,
		authed:     s.cfg.RequirePass == "",
		created:    time.Now(),
	}
	if la := nc.LocalAddr(); la != nil {
		c.laddr = la.String()
	}
	s.mu.Lock()
	s.clients[c] = struct{}{}
	if s.draining.Load() {
		_ = nc.SetReadDeadline(time.Now()) // accepted as Drain began
	}
	s.mu.Unlock()
	return c
}

// serveConn is a connection's goroutine: it reads the commands of each read
// (a pipeline) and runs them as one batch, until the client leaves, QUIT, a
// protocol error or a failed write.
func (s *Server) serveConn(c *client) {
	var err error
	defer func() {
		_ = c.nc.Close()
		s.closed(c, err)
	}()
	for !c.quit {
		var cmds []redcon.Command
		cmds, err = c.rd.next(!c.authed)
		if err != nil && s.drainGrace(c, err) {
			continue
		}
		if err != nil {
			var pe *ProtocolError
			if errors.As(err, &pe) && pe.Reply() != "" {
				_ = c.nc.SetWriteDeadline(time.Now().Add(errorWriteTimeout))
				_, _ = io.WriteString(c.nc, pe.Reply())
			}
			if err == io.EOF {
				err = nil
			}
			return
		}
		s.commandsTotal.Add(int64(len(cmds)))
		s.runPipeline(c, cmds)
	}
}

// While the server drains, a connection's read deadline lies in the past,
// and a read fails at once, even with bytes waiting in the socket. So the
// first failed read is given drainPoll to take what has arrived, and a
// connection caught in the middle of a command (the rest of a pipeline
// written in one go is on its way) drainPartialGrace to finish it, once.
const (
	drainPoll         = 5 * time.Millisecond
	drainPartialGrace = 200 * time.Millisecond
)

// drainGrace reports whether a connection whose read failed with err
// while the server drains should read on (see drainPoll). Closing in the
// middle of a pipeline would answer its first half and drop the rest,
// which a client that re-sends a failed pipeline whole would apply twice.
func (s *Server) drainGrace(c *client, err error) bool {
	var ne net.Error
	if !s.draining.Load() || c.drainGraces >= 2 || !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	mid := c.rd.partial()
	wait := drainPoll
	switch {
	case mid:
		wait = drainPartialGrace
	case c.drainGraces > 0:
		return false // polled already, and nothing is unfinished
	}
	c.drainGraces++
	_ = c.nc.SetReadDeadline(time.Now().Add(wait))
	return true
}

// errorWriteTimeout bounds the write of a protocol error's reply.
const errorWriteTimeout = time.Second

// lockedConn is a client's connection, whose Write is serialized by a
// mutex so that each Write reaches the client whole and in one piece. The
// connection's goroutine writes each segment's replies (pipeline.go) as
// one Write, and the server writes the out-of-band RESP3 pushes of
// client-side caching (tracking.go) from another goroutine, also as one
// Write each: a push thus falls between replies, never inside one.
type lockedConn struct {
	net.Conn
	wmu sync.Mutex // serializes Write; a leaf lock
}

// Write writes b whole, under the connection's write mutex.
func (c *lockedConn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.Conn.Write(b)
}

// closed unregisters a connection.
func (s *Server) closed(c *client, err error) {
	c.stopTracking()
	s.mu.Lock()
	delete(s.clients, c)
	s.mu.Unlock()
	s.connected.Add(-1)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		s.cfg.Logger.Debug("client connection ended", "id", c.id, "addr", c.addr, "err", err)
	}
}

// starting returns why the executor cannot serve yet since the process
// started (Starter), or nil.
func (s *Server) starting() error {
	if s.starter == nil {
		return nil
	}
	return s.starter.Starting()
}
