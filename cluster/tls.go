package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Mutual TLS between peers. hashicorp/raft has no TLS of its own: its
// NetworkTransport runs over a StreamLayer, and cluster/peer's is one over
// crypto/tls when Config.TLS is set. The forward listener and its dialer
// use the same tls.Config, so one certificate per node, signed by the
// cluster's CA, admits it to both: each side verifies the other's certificate against the CA (the
// dialer also checks that the certificate names the address it dialed), and
// a peer without such a certificate is refused during the handshake, before
// a byte of Raft or forwarding is read.

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
