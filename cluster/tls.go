package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// Mutual TLS between peers. hashicorp/raft has no TLS of its own: its
// NetworkTransport runs over a StreamLayer, and peerStreamLayer (peerconn.go)
// is one over crypto/tls when Config.TLS is set. The forward listener and its dialer use the same tls.Config,
// so one certificate per node, signed by the cluster's CA, admits it to
// both: each side verifies the other's certificate against the CA (the
// dialer also checks that the certificate names the address it dialed), and
// a peer without such a certificate is refused during the handshake, before
// a byte of Raft or forwarding is read.

// peerHandshakeTimeout bounds an accepted connection's TLS handshake, so a
// peer that connects and says nothing holds no goroutine for long.
const peerHandshakeTimeout = 10 * time.Second

// PeerTLSConfig builds the mutual-TLS configuration for Raft and forwarding
// (Config.TLS): this node's certificate and key, presented both as a server
// and as a client, and the CA that every peer's certificate must be signed
// by. Node certificates therefore need both the serverAuth and clientAuth
// extended key usages (or none), and a subject alternative name for the
// host the others dial (an IP SAN for an IP address).
func PeerTLSConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("raft TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	pool, err := LoadCertPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("raft TLS CA: %w", err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		RootCAs:      pool,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// LoadCertPool reads PEM certificates from file into a new pool.
func LoadCertPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate found", file)
	}
	return pool, nil
}

// peerListener accepts TLS connections whose handshake runs, bounded by
// peerHandshakeTimeout, on the first Read or Write: in the connection's own
// goroutine, never in the accept loop.
type peerListener struct {
	net.Listener
	cfg *tls.Config
}

func (l *peerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &peerConn{Conn: tls.Server(c, l.cfg)}, nil
}

// peerConn is an accepted TLS connection that completes its handshake
// within peerHandshakeTimeout before any data passes.
type peerConn struct {
	*tls.Conn
	once sync.Once
	err  error
}

func (c *peerConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), peerHandshakeTimeout)
		defer cancel()
		if err := c.Conn.HandshakeContext(ctx); err != nil {
			c.err = fmt.Errorf("peer %s refused: TLS handshake: %w", c.RemoteAddr(), err)
			_ = c.Conn.Close()
		}
	})
	return c.err
}

func (c *peerConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *peerConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
