package peer

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"
)

// handshakeTimeout bounds an accepted connection's TLS handshake, so a
// peer that connects and says nothing holds no goroutine for long.
const handshakeTimeout = 10 * time.Second

// tlsListener accepts TLS connections whose handshake runs, bounded by
// handshakeTimeout, on the first Read or Write: in the connection's own
// goroutine, never in the accept loop.
type tlsListener struct {
	net.Listener
	cfg *tls.Config
}

func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tlsConn{Conn: tls.Server(c, l.cfg)}, nil
}

// tlsConn is an accepted TLS connection that completes its handshake
// within handshakeTimeout before any data passes.
type tlsConn struct {
	*tls.Conn
	once sync.Once
	err  error
}

func (c *tlsConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
		defer cancel()
		if err := c.Conn.HandshakeContext(ctx); err != nil {
			c.err = fmt.Errorf("peer %s refused: TLS handshake: %w", c.RemoteAddr(), err)
			_ = c.Conn.Close()
		}
	})
	return c.err
}

func (c *tlsConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *tlsConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
