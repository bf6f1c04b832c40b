package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// SIGHUP (systemd's ExecReload, kill -HUP) re-reads the TLS certificate and
// key files, of the client listener and of the peers, so a rotated
// certificate takes effect without a restart. Other settings, CA files
// included, need a restart (docs/operations.md, "Reloading").

// certFile is one certificate and key pair that SIGHUP reloads; handshakes
// use the latest that loaded.
type certFile struct {
	cert, key string
	current   atomic.Pointer[tls.Certificate]
}

func (c *certFile) load() error {
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		return fmt.Errorf("certificate %s with key %s: %w", c.cert, c.key, err)
	}
	c.current.Store(&pair)
	return nil
}

// reloadSet holds the certificate files the process uses.
type reloadSet struct {
	mu    sync.Mutex
	files map[[2]string]*certFile
}

// use makes cfg's certificate come from the files cert and key, loaded
// now and again on each reload: cfg's Certificates are replaced by
// GetCertificate (server side) and GetClientCertificate (client side).
func (r *reloadSet) use(cfg *tls.Config, cert, key string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := [2]string{cert, key}
	f := r.files[k]
	if f == nil {
		f = &certFile{cert: cert, key: key}
		if err := f.load(); err != nil {
			return err
		}
		if r.files == nil {
			r.files = map[[2]string]*certFile{}
		}
		r.files[k] = f
	}
	cfg.Certificates = nil
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return f.current.Load(), nil }
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return f.current.Load(), nil }
	return nil
}

// reload re-reads every pair; a pair that fails to load keeps the one it
// had. It returns how many pairs reloaded and the errors.
func (r *reloadSet) reload() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	n := 0
	for _, f := range r.files {
		if err := f.load(); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
