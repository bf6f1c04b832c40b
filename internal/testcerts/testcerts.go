// Package testcerts generates throwaway certificate authorities and
// certificates for tests: a CA, a node certificate valid for 127.0.0.1 and
// localhost (server and client use), a client certificate, and a second,
// unrelated CA with a certificate of its own, all as PEM files in a
// directory.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Set is the paths of one generated set of PEM files.
type Set struct {
	CA         string // the CA certificate
	Cert, Key  string // node: 127.0.0.1 and localhost, serverAuth and clientAuth
	ClientCert string // client: clientAuth, signed by CA
	ClientKey  string
	// A certificate from another CA, valid for 127.0.0.1 with both uses:
	// everything the node certificate is, except trusted.
	ForeignCA   string
	ForeignCert string
	ForeignKey  string
}

// Generate writes a Set into dir (usually t.TempDir()).
func Generate(t testing.TB, dir string) Set {
	t.Helper()
	s := Set{
		CA:          filepath.Join(dir, "ca.pem"),
		Cert:        filepath.Join(dir, "node.pem"),
		Key:         filepath.Join(dir, "node-key.pem"),
		ClientCert:  filepath.Join(dir, "client.pem"),
		ClientKey:   filepath.Join(dir, "client-key.pem"),
		ForeignCA:   filepath.Join(dir, "foreign-ca.pem"),
		ForeignCert: filepath.Join(dir, "foreign.pem"),
		ForeignKey:  filepath.Join(dir, "foreign-key.pem"),
	}
	ca, caKey := newCA(t, "sluice test CA", s.CA)
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	issue(t, ca, caKey, "node", both, s.Cert, s.Key)
	issue(t, ca, caKey, "client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, s.ClientCert, s.ClientKey)
	fca, fcaKey := newCA(t, "foreign CA", s.ForeignCA)
	issue(t, fca, fcaKey, "node", both, s.ForeignCert, s.ForeignKey)
	return s
}

// Pool returns a pool holding the certificates of the PEM file.
func Pool(t testing.TB, file string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		t.Fatalf("%s: no certificate", file)
	}
	return p
}

// KeyPair loads a certificate and its key.
func KeyPair(t testing.TB, cert, key string) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newCA(t testing.TB, name, certFile string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	return cert, key
}

func issue(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, usage []x509.ExtKeyUsage, certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serialNumber(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t testing.TB, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func serialNumber(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
