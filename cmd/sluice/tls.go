package main

import (
	"crypto/tls"
	"fmt"

	"github.com/sluice-rl/sluice/cluster"
)

// TLS: the client listener's certificates, and mutual TLS between peers.

// clientTLSConfig builds the TLS listener's configuration: its certificate,
// and with --tls-ca-cert-file, client certificates required and verified.
func (c *config) clientTLSConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: with %s %s: %w", c.setting("tls-cert-file"), c.setting("tls-key-file"), c.TLSKeyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.certs != nil { // SIGHUP reloads the pair (reload.go)
		if err := c.certs.use(cfg, c.TLSCertFile, c.TLSKeyFile); err != nil {
			return nil, fmt.Errorf("%s: %w", c.setting("tls-cert-file"), err)
		}
	}
	if err := c.verifyClients(cfg, c.TLSCACertFile, "tls-ca-cert-file"); err != nil {
		return nil, err
	}
	return cfg, nil
}

// verifyClients makes cfg require client certificates signed by the CAs
// in caFile (the setting named by setting); nothing when caFile is "".
func (c *config) verifyClients(cfg *tls.Config, caFile, setting string) error {
	if caFile == "" {
		return nil
	}
	pool, err := cluster.LoadCertPool(caFile)
	if err != nil {
		return fmt.Errorf("%s: %w", c.setting(setting), err)
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	return nil
}

// peerTLSConfig builds the mutual TLS configuration of Raft and forwarding,
// or nil without --raft-tls-* flags.
func (c *config) peerTLSConfig() (*tls.Config, error) {
	if !c.raftTLS() {
		return nil, nil
	}
	cfg, err := cluster.PeerTLSConfig(c.RaftTLSCertFile, c.RaftTLSKeyFile, c.RaftTLSCACertFile)
	if err == nil && c.certs != nil { // SIGHUP reloads the pair (reload.go)
		err = c.certs.use(cfg, c.RaftTLSCertFile, c.RaftTLSKeyFile)
	}
	return cfg, err
}

// raftTLS reports whether peer traffic runs over mutual TLS.
func (o *opsConfig) raftTLS() bool { return o.RaftTLSCertFile != "" }

func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}
