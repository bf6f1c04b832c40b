// Package peer is the wire between sluice's nodes below forwarding: the
// frames every message outside Raft's own travels in (frame.go), and peer
// connections that cannot get stuck, plain or over mutual TLS, for Raft's
// transport and for cluster's forward listener alike (conn.go, tls.go),
// the accept loop of both listeners (accept.go), with the dial maps
// fault-injection tests route them through (dialmap.go); the Network every listen and dial of a node goes through,
// TCP in the product and in memory for in-process tests (network.go;
// the in-memory one is internal/testkit/memnet). It knows no Raft group, FSM or message: cluster uses it,
// never the reverse.
package peer

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"syscall"
	"time"
)

// Peer connections that cannot get stuck.
//
// When packets between two nodes are lost for a while, TCP keeps
// retransmitting what it sent with a doubling timeout: after a 30 s cut a
// connection may not send again for another 20 s or more after the network
// heals, and every call queued on it waits that long. So every connection
// between peers (Raft's, both ways, and forwarding's) gets:
//
//   - TCP_USER_TIMEOUT: the kernel drops a connection whose sent data goes
//     unacknowledged for longer, so no connection is ever deeper in its
//     backoff than that when the network heals: it is dropped (and the
//     next call dials afresh) or its next retransmission comes soon;
//   - TCP keepalive, so that an idle connection is probed and dropped the
//     same way (the user timeout also bounds unanswered probes);
//   - a bounded dial: a dial through a dead network fails within
//     Timeouts.Dial, and the next one is a fresh SYN.
//
// Forwarding adds its own (cluster/forward/client.go): a write deadline,
// a call that times out after it was written drops its connection, and a
// connection idle for a while is pinged before it is used again.

// Timeouts are the timing choices for peer connections, derived from
// the node's configuration (NewTimeouts).
type Timeouts struct {
	// User is TCP_USER_TIMEOUT and the keepalive idle time: Raft gives up
	// on a silent leader after HeartbeatTimeout, and a connection that has
	// heard nothing back for that long is no more alive. Clamped to
	// [500ms, 1s]: at least 500 ms, so that a congested link (TCP's first
	// retransmissions come after 200 and 600 ms) is not dropped; at most
	// 1 s, so that a connection stuck when the network heals is dropped
	// well within the 2 s the cluster promises to serve again in.
	User time.Duration
	// KeepIntvl is the interval between keepalive probes: three fit in
	// User.
	KeepIntvl time.Duration
	// Dial bounds a dial (and its TLS handshake): User, at least 1 s
	// (TCP's first SYN retransmission comes after 1 s).
	Dial time.Duration
	// Write is the forward writer's deadline: ClusterTimeout, after which
	// every call written on the connection has timed out anyway.
	Write time.Duration
	// Idle: a pooled forward connection that has received nothing for this
	// long (User) is pinged before it is used again.
	Idle time.Duration
	// Ping bounds that ping: ClusterTimeout/8 in [50ms, 250ms], a round
	// trip on a LAN many times over, and a small part of the command's
	// own deadline.
	Ping time.Duration
}

// NewTimeouts derives the timeouts from a node's ClusterTimeout and Raft
// HeartbeatTimeout.
func NewTimeouts(clusterTimeout, heartbeat time.Duration) Timeouts {
	user := min(max(heartbeat, 500*time.Millisecond), time.Second)
	return Timeouts{
		User:      user,
		KeepIntvl: user / 3,
		Dial:      max(user, time.Second),
		Write:     clusterTimeout,
		Idle:      user,
		Ping:      min(max(clusterTimeout/8, 50*time.Millisecond), 250*time.Millisecond),
	}
}

// keepAlive is the keepalive configuration of peer connections.
func (t Timeouts) keepAlive() net.KeepAliveConfig {
	return net.KeepAliveConfig{Enable: true, Idle: t.User, Interval: t.KeepIntvl, Count: 3}
}

// control sets TCP_USER_TIMEOUT on a socket before it connects or listens
// (accepted sockets inherit it from the listener).
func (t Timeouts) control(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = setUserTimeout(fd, t.User) }); err != nil {
		return err
	}
	return serr
}

// Listen listens for peers on addr with the peer socket options: over
// mutual TLS when cfg is set.
func Listen(addr string, cfg *tls.Config, t Timeouts) (net.Listener, error) {
	lc := net.ListenConfig{Control: t.control, KeepAliveConfig: t.keepAlive()}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	ln = &keepAliveListener{Listener: ln, t: t}
	if cfg == nil {
		return ln, nil
	}
	return &tlsListener{Listener: ln, cfg: cfg}, nil
}

// keepAliveListener applies the keepalive settings to every accepted
// connection (ListenConfig's KeepAliveConfig covers them too; this also
// re-applies TCP_USER_TIMEOUT, which not every kernel copies on accept).
type keepAliveListener struct {
	net.Listener
	t Timeouts
}

func (l *keepAliveListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetKeepAliveConfig(l.t.keepAlive())
		if rc, err := tc.SyscallConn(); err == nil {
			_ = l.t.control("", "", rc)
		}
	}
	return c, nil
}

// Dial connects to a peer at addr within timeout (at most t.Dial),
// with the peer socket options: over mutual TLS (handshake included in the
// timeout) when cfg is set.
func Dial(cfg *tls.Config, addr string, timeout time.Duration, t Timeouts) (net.Conn, error) {
	d := &net.Dialer{Timeout: min(timeout, t.Dial), Control: t.control, KeepAliveConfig: t.keepAlive()}
	if cfg == nil {
		return d.Dial("tcp", addr)
	}
	return tls.DialWithDialer(d, "tcp", addr, cfg)
}

// Advertise returns the address a Raft listener ln is announced at:
// advertise when set (nil otherwise: the listener's own), which the
// other nodes must be able to dial.
func Advertise(ln net.Listener, advertise string) (net.Addr, error) {
	var adv net.Addr
	if advertise != "" {
		a, err := net.ResolveTCPAddr("tcp", advertise)
		if err != nil {
			return nil, fmt.Errorf("advertise address %q: %w", advertise, err)
		}
		adv = a
	}
	addr := adv
	if addr == nil {
		addr = ln.Addr()
	}
	if a, ok := addr.(*net.TCPAddr); !ok || a.IP == nil || a.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft address %s cannot be dialed by others: give an advertise address", addr)
	}
	return adv, nil
}
