package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testcerts"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// TestOpsConfigFileClientCerts starts a real process from a configuration
// file that enables the TLS listener with client certificates required,
// and overrides one of its settings on the command line: the file's
// settings and the override both hold, and only a client with a
// certificate from the CA gets in (go-redis, and redis-cli when built with
// TLS).
func TestOpsConfigFileClientCerts(t *testing.T) {
	certs := testcerts.Generate(t, t.TempDir())
	tlsAddr := freeAddr(t)
	path := writeConfig(t, fmt.Sprintf(`in-memory yes
maxclients 40
max-keys 10
tls-addr %s
tls-cert-file %s
tls-key-file %s
tls-ca-cert-file %s
`, tlsAddr, certs.Cert, certs.Key, certs.CA))
	n := startOpsNode(t, "--config", path, "--maxclients", "41")
	ctx := context.Background()

	plain := redis.NewClient(&redis.Options{Addr: n.resp, MaxRetries: -1})
	defer plain.Close()
	for setting, want := range map[string]string{"maxclients": "41", "max-keys": "10"} {
		got, err := plain.ConfigGet(ctx, setting).Result()
		if err != nil || got[setting] != want {
			t.Errorf("CONFIG GET %s: %v %v, want %s", setting, got, err, want)
		}
	}

	rootTLS := &tls.Config{RootCAs: testcerts.Pool(t, certs.CA), ServerName: "localhost"}
	anon := redis.NewClient(&redis.Options{Addr: tlsAddr, MaxRetries: -1, TLSConfig: rootTLS})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil {
		t.Fatal("a client without a certificate got in")
	}
	clientCert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	withCert := rootTLS.Clone()
	withCert.Certificates = []tls.Certificate{clientCert}
	c := redis.NewClient(&redis.Options{Addr: tlsAddr, MaxRetries: -1, TLSConfig: withCert})
	defer c.Close()
	if r, err := c.Do(ctx, "RL.TOKEN", "cert", 5, "1/m").Int64Slice(); err != nil || r[0] != 1 {
		t.Fatalf("RL.TOKEN with a client certificate: %v %v", r, err)
	}

	help, _ := exec.Command("redis-cli", "--help").CombinedOutput()
	if !strings.Contains(string(help), "--tls") {
		t.Log("redis-cli lacks TLS support: skipping its part")
		return
	}
	_, port, _ := net.SplitHostPort(tlsAddr)
	cli := func(extra ...string) (string, error) {
		args := append([]string{"--tls", "--cacert", certs.CA, "-h", "127.0.0.1", "-p", port}, extra...)
		out, err := exec.Command("redis-cli", append(args, "PING")...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := cli(); err == nil && out == "PONG" {
		t.Fatalf("redis-cli without a certificate got in: %q", out)
	}
	if out, err := cli("--cert", certs.ClientCert, "--key", certs.ClientKey); err != nil || out != "PONG" {
		t.Fatalf("redis-cli with a certificate: %q %v", out, err)
	}
}

// TestOpsNotReadyWithoutLeader: a node whose peers never answer has no
// leader; /readyz says so with 503 while /healthz stays 200.
func TestOpsNotReadyWithoutLeader(t *testing.T) {
	metrics := freeAddr(t)
	peers := "n1=" + freeAddr(t) + ",n2=" + freeAddr(t) + ",n3=" + freeAddr(t)
	startProcess(t, binary, "--id", "n1", "--peers", peers, "--in-memory",
		"--addr", freeAddr(t), "--forward-addr", freeAddr(t),
		"--metrics-addr", metrics, "--log-level", "warn")
	testkit.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if code, _ := httpGet(metrics + "/healthz"); code != http.StatusOK {
			return fmt.Errorf("/healthz never answered: %d", code)
		}
		return nil
	})
	code, body := httpGet(metrics + "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "no leader") {
		t.Fatalf("/readyz without a leader: %d %q, want 503 naming the missing leader", code, body)
	}
}
