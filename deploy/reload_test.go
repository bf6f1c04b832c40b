package deploy

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testcerts"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// TestReloadOnSIGHUP: the unit's ExecReload sends SIGHUP. The node keeps
// running and its TLS listener presents the certificate now in the files.
func TestReloadOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	var sets [2]testcerts.Set
	for i := range sets {
		sub := filepath.Join(dir, string(rune('a'+i)))
		if err := os.Mkdir(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		sets[i] = testcerts.Generate(t, sub)
	}
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	install := func(s testcerts.Set) {
		for from, to := range map[string]string{s.Cert: cert, s.Key: key} {
			data, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(to, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(sets[0])
	a := freeAddrs(t, 2)
	addr, tlsAddr := a[0], a[1]
	p, err := sluiceproc.Start("sluice", binary, []string{"--addr", addr, "--in-memory", "--log-level", "warn",
		"--tls-addr", tlsAddr, "--tls-cert-file", cert, "--tls-key-file", key}, sluiceproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	// presented returns the certificate the TLS listener presents, or nil
	// while it does not answer.
	presented := func() []byte {
		conn, err := tls.Dial("tcp", tlsAddr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			return nil
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Raw
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		testkit.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
			if !ok() {
				return fmt.Errorf("timed out waiting for %s", what)
			}
			return nil
		})
	}
	var first []byte
	waitFor("the TLS listener", func() bool { first = presented(); return first != nil })
	install(sets[1])
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("the new certificate", func() bool {
		c := presented()
		return c != nil && !bytes.Equal(c, first)
	})
	select {
	case <-p.Exited():
		t.Fatalf("SIGHUP ended the process: %v", p.Err())
	default:
	}
	c, err := respwire.Dial(addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v, err := c.Do(2*time.Second, "PING"); err != nil || v.Str != "PONG" {
		t.Fatalf("PING after SIGHUP: %v %v", v, err)
	}
}
