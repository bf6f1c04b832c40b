package peer

import (
	"crypto/tls"
	"net"
	"time"
)

// Network is where a node listens for its peers and how it dials them:
// every stream between nodes (Raft's, through the host's one listener,
// and forwarding's with its control messages) is opened through it. The
// product runs TCP (TCPNetwork); in-process tests run an in-memory one (internal/testkit/memnet), so
// that they build nodes exactly as the binary does (one constructor) without
// a socket, as hashicorp/raft's MakeCluster runs over its InmemTransport.
type Network interface {
	// Listen listens on addr (host:port; port 0 picks one).
	Listen(addr string) (net.Listener, error)
	// Dial connects to the listener at addr within timeout.
	Dial(addr string, timeout time.Duration) (net.Conn, error)
}

// TCPNetwork is the product's Network: TCP with the peer socket options
// (Listen, Dial), over mutual TLS when TLS is set.
type TCPNetwork struct {
	TLS *tls.Config
	T   Timeouts
}

// Listen implements Network.
func (n TCPNetwork) Listen(addr string) (net.Listener, error) { return Listen(addr, n.TLS, n.T) }

// Dial implements Network: within timeout, and at most T.Dial.
func (n TCPNetwork) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	return Dial(n.TLS, addr, timeout, n.T)
}
