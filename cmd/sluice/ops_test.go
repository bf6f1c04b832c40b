package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testcerts"
	"github.com/sluice-rl/sluice/internal/testkit"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigFilePrecedence: the file sets what the command line does not;
// the command line wins; Redis's quoting and yes/no work.
func TestConfigFilePrecedence(t *testing.T) {
	path := writeConfig(t, `# sluice.conf
maxclients 50

requirepass "pa ss\x21"
	enable-debug-command   yes
max-keys 10
maxmemory 1mb
log-level 'warn'
in-memory yes
`)
	for _, args := range [][]string{
		{"--config", path, "--maxclients", "60"},
		{"--maxclients=60", "-config=" + path},
	} {
		c, err := parseFlags(args, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if c.MaxClients != 60 || c.RequirePass != "pa ss!" || !bool(c.EnableDebug) || c.MaxKeys != 10 ||
			c.MaxMemory != 1<<20 || c.LogLevel != "warn" || !c.InMemory || c.Addr != "127.0.0.1:6379" {
			t.Fatalf("%v: %+v", args, c)
		}
	}
	// A value the command line overrides is not checked against the
	// file's: only the winning one counts.
	path = writeConfig(t, "maxclients 0\n")
	if _, err := parseFlags([]string{"--config", path, "--maxclients", "5"}, io.Discard); err != nil {
		t.Fatal(err)
	}
}

// TestConfigFileErrors: unknown names and bad values stop start-up with a
// message naming the file and line.
func TestConfigFileErrors(t *testing.T) {
	cases := []struct{ text, want string }{
		{"maxclients 5\nbogus-setting 1\n", `:2: unknown setting "bogus-setting"`},
		{"# ok\nmaxclients many\n", `:2: bad value "many" for maxclients`},
		{"maxclients 0\n", `:1: maxclients: want at least 1, got 0`},
		{"maxmemory 12zb\n", `:1: bad value "12zb" for maxmemory`},
		{"requirepass \"unclosed\n", `:1: unbalanced quotes`},
		{"maxclients 5 6\n", `:1: maxclients takes one value, got 2`},
		{"addr\n", `:1: addr needs a value`},
		{"config other.conf\n", `:1: unknown setting "config"`},
		{"\n\nprotected-mode maybe\n", `:3: protected-mode: want yes or no, got "maybe"`},
		// Values checked beyond their syntax name their line too.
		{"id n1\npeers garbage\n", `:2: peers: "garbage" is not id=host:port`},
		{"raft-addr 8.8.8.8:7001\n", `:1: raft-addr: 8.8.8.8:7001 is a public address`},
		{"id n1\npeers n1=0.0.0.0:7001\n", `:2: peers: n1's Raft address: 0.0.0.0:7001 binds every interface`},
		{"forward-addr 8.8.4.4:8001\n", `:1: forward-addr: 8.8.4.4:8001 is a public address`},
		{"tls-addr 127.0.0.1:0\ntls-cert-file /nonexistent/c.pem\ntls-key-file /nonexistent/k.pem\n", `:2: tls-cert-file: with`},
		{"raft-tls-cert-file /nonexistent/c.pem\nraft-tls-key-file /nonexistent/k.pem\nraft-tls-ca-cert-file /nonexistent/ca.pem\n", `:1: raft-tls-cert-file: `},
	}
	for _, c := range cases {
		path := writeConfig(t, c.text)
		_, err := parseFlags([]string{"--config", path}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), path+c.want) {
			t.Errorf("%q: error %v, want it to contain %q", c.text, err, path+c.want)
		}
	}
	// --peers from the file without --id: the message names both.
	path := writeConfig(t, "peers n1=127.0.0.1:7001\n")
	if _, err := parseFlags([]string{"--config", path}, io.Discard); err == nil || !strings.Contains(err.Error(), "--id: required with "+path+":1: peers") {
		t.Errorf("--peers without --id: %v", err)
	}
	if _, err := parseFlags([]string{"--config", "/nonexistent/sluice.conf"}, io.Discard); err == nil || !strings.Contains(err.Error(), "/nonexistent/sluice.conf") {
		t.Errorf("missing file: %v", err)
	}
}

func TestByteSizes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "1k": 1000, "1kb": 1024, "100mb": 100 << 20,
		"1gb": 1 << 30, "2G": 2e9, "5m": 5e6, "7b": 7} {
		if got, err := parseByteSize(in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "mb", "-1", "1.5gb", "1tb", "+5", "99999999999gb"} {
		if _, err := parseByteSize(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// TestPeerAddressesPrivate: without mutual TLS, Raft and forwarding listen
// only on loopback or private addresses.
func TestPeerAddressesPrivate(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:7001", "[::1]:7001", "10.1.2.3:7001", "172.16.0.9:7001", "192.168.1.1:7001",
		"[fd00::1]:7001", "169.254.0.7:7001", "[fe80::1]:7001", "100.64.1.2:7001", "localhost:7001"} {
		if err := checkPrivate(addr); err != nil {
			t.Errorf("%s refused: %v", addr, err)
		}
	}
	for addr, want := range map[string]string{
		"0.0.0.0:7001": "binds every interface", "[::]:7001": "binds every interface", ":7001": "binds every interface",
		"8.8.8.8:7001": "is a public address", "[2001:4860::8888]:7001": "is a public address", "100.128.0.1:7001": "is a public address",
	} {
		err := checkPrivate(addr)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--raft-tls-cert-file") {
			t.Errorf("%s: %v", addr, err)
		}
	}
	// At start-up: a public --raft-addr stops the process before Raft starts.
	err := run(context.Background(), []string{"--addr", "127.0.0.1:0", "--raft-addr", "8.8.8.8:7001",
		"--data-dir", t.TempDir(), "--log-level", "error"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--raft-addr: 8.8.8.8:7001 is a public address") {
		t.Fatalf("run: %v", err)
	}
	// TLS flags go together, and the TLS listener needs its certificate.
	for args, want := range map[string]string{
		"--raft-tls-cert-file x":                                  "go together",
		"--tls-addr 127.0.0.1:0":                                  "--tls-addr: needs --tls-cert-file and --tls-key-file",
		"--tls-cert-file a --tls-key-file b":                      "--tls-addr: required with",
		"--max-keys -1":                                           "--max-keys: want 0",
		"--tls-addr 0.0.0.0:1 --tls-cert-file a --tls-key-file b": "DENIED",
	} {
		if _, err := parseFlags(strings.Fields(args), io.Discard); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}

// opsNode is one sluice process started by these tests.
type opsNode struct {
	cmd     *exec.Cmd
	resp    string
	metrics string
}

// startProcess starts bin with args, its output in a log file that is
// printed (named after bin: sluice or redis-server) if the test fails; the
// process is killed when the test ends.
func startProcess(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "sluice.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sluiceproc.Start(filepath.Base(bin), bin, args, sluiceproc.Options{Output: logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", filepath.Base(bin), b)
		}
	})
	return p.Cmd
}

func startOpsNode(t *testing.T, args ...string) *opsNode {
	t.Helper()
	n := &opsNode{
		resp:    freeAddr(t),
		metrics: freeAddr(t),
	}
	args = append([]string{"--addr", n.resp, "--metrics-addr", n.metrics, "--log-level", "warn"}, args...)
	n.cmd = startProcess(t, binary, args...)
	// Ready when /readyz says so.
	testkit.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if code, _ := httpGet(n.metrics + "/readyz"); code != http.StatusOK {
			return fmt.Errorf("not ready: %d", code)
		}
		return nil
	})
	return n
}

func httpGet(addr string) (int, string) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// wantMetrics checks that each of want's series is in the scrape m with
// its value.
func wantMetrics(t *testing.T, m, want map[string]float64) {
	t.Helper()
	for key, v := range want {
		if got, ok := m[key]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, v)
		}
	}
}

// scrape fetches and parses /metrics.
func (n *opsNode) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	code, body := httpGet(n.metrics + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := name
			for _, lp := range m.GetLabel() {
				key += fmt.Sprintf(",%s=%s", lp.GetName(), lp.GetValue())
			}
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// metricsDocumented fails the test for every sluice_* metric family in a
// scrape that docs/operations.md does not name.
func metricsDocumented(t *testing.T, m map[string]float64) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for key := range m {
		name, _, _ := strings.Cut(key, ",")
		if !strings.HasPrefix(name, "sluice_") || seen[name] {
			continue
		}
		seen[name] = true
		// The whole name, not a prefix of a longer one.
		if !regexp.MustCompile(regexp.QuoteMeta(name) + `[^a-z0-9_]`).Match(doc) {
			t.Errorf("docs/operations.md does not name the metric %s", name)
		}
	}
	if len(seen) < 10 {
		t.Errorf("only %d sluice_* metric families scraped", len(seen))
	}
}

// TestOpsTLSMetricsOOM: one in-memory node with a TLS listener, a key limit
// and metrics: redis-cli and go-redis over TLS; OOM on new keys while old
// ones answer; the metrics scraped and parsed agree.
func TestOpsTLSMetricsOOM(t *testing.T) {
	certs := testcerts.Generate(t, t.TempDir())
	tlsAddr := freeAddr(t)
	n := startOpsNode(t, "--in-memory", "--max-keys", "3", "--tls-addr", tlsAddr,
		"--tls-cert-file", certs.Cert, "--tls-key-file", certs.Key)
	ctx := context.Background()
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)

	// redis-cli over TLS, when it was built with TLS.
	if help, _ := exec.Command("redis-cli", "--help").CombinedOutput(); strings.Contains(string(help), "--tls") {
		out, err := exec.Command("redis-cli", "--tls", "--cacert", certs.CA, "-h", "127.0.0.1", "-p", tlsPort, "PING").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "PONG" {
			t.Fatalf("redis-cli --tls PING: %q %v", out, err)
		}
		out, err = exec.Command("redis-cli", "--tls", "--cacert", certs.CA, "-h", "127.0.0.1", "-p", tlsPort, "RL.TOKEN", "cli", "5", "1/m").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "1\n5\n4\n") {
			t.Fatalf("redis-cli --tls RL.TOKEN: %q %v", out, err)
		}
	} else {
		t.Log("redis-cli lacks TLS support: skipping its part")
		if err := redis.NewClient(&redis.Options{Addr: n.resp}).Do(ctx, "RL.TOKEN", "cli", 5, "1/m").Err(); err != nil {
			t.Fatal(err)
		}
	}

	c := redis.NewClient(&redis.Options{Addr: tlsAddr, Protocol: 3, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: testcerts.Pool(t, certs.CA), ServerName: "localhost"}})
	defer c.Close()
	for _, k := range []string{"a", "b"} {
		if r, err := c.Do(ctx, "RL.TOKEN", k, 2, "1/m").Int64Slice(); err != nil || r[0] != 1 {
			t.Fatalf("RL.TOKEN %s over TLS: %v %v", k, r, err)
		}
	}
	// Full: three keys. A new key is refused; the old ones keep working.
	err := c.Do(ctx, "RL.TOKEN", "new", 2, "1/m").Err()
	if err == nil || err.Error() != "OOM command not allowed: the key limit is reached (max-keys 3)" {
		t.Fatalf("a fourth key: %v", err)
	}
	if r, err := c.Do(ctx, "RL.TOKEN", "a", 2, "1/m").Int64Slice(); err != nil || r[0] != 1 || r[2] != 0 {
		t.Fatalf("an old key: %v %v", r, err)
	}
	if r, err := c.Do(ctx, "RL.TOKEN", "a", 2, "1/m").Int64Slice(); err != nil || r[0] != 0 {
		t.Fatalf("an old key, denied: %v %v", r, err)
	}
	if r, err := c.Do(ctx, "RL.TOKEN", "new", 2, "1/m", "COST", 3).Int64Slice(); err != nil || r[0] != 0 || r[3] != -1 {
		t.Fatalf("a denied call on an absent key creates nothing, so no OOM: %v %v", r, err)
	}
	if r, err := c.Do(ctx, "RL.PEEK", "b").Int64Slice(); err != nil || r[2] != 1 {
		t.Fatalf("peek: %v %v", r, err)
	}
	if n, err := c.Del(ctx, "b").Result(); err != nil || n != 1 {
		t.Fatalf("DEL: %v %v", n, err)
	}
	if err := c.Do(ctx, "RL.TOKEN", "new", 2, "1/m").Err(); err != nil {
		t.Fatalf("after a DEL: %v", err)
	}
	info, err := c.Info(ctx, "memory", "stats").Result()
	if err != nil || !strings.Contains(info, "max_keys:3") || !strings.Contains(info, "total_oom_rejections:1") {
		t.Fatalf("INFO: %v\n%s", err, info)
	}

	m := n.scrape(t)
	metricsDocumented(t, m)
	wantMetrics(t, m, map[string]float64{
		"sluice_decisions_total,command=rl.token,result=allowed": 5,
		"sluice_decisions_total,command=rl.token,result=denied":  2,
		"sluice_decisions_total,command=rl.token,result=error":   1,
		"sluice_oom_rejections_total":                            1,
		"sluice_keys":                                            3,
		"sluice_max_keys":                                        3,
		"sluice_commands_total,command=del":                      1,
	})
	for _, key := range []string{"sluice_connected_clients", "sluice_engine_memory_bytes", "go_goroutines",
		"sluice_command_duration_seconds,command=rl.token", "sluice_rejected_connections_total"} {
		if _, ok := m[key]; !ok {
			t.Errorf("%s missing", key)
		}
	}
	for key := range m {
		if strings.HasPrefix(key, "sluice_raft_") {
			t.Errorf("%s on a node without Raft", key)
		}
	}
	if code, body := httpGet(n.metrics + "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, _ := httpGet(n.metrics + "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --pprof: %d, want 404", code)
	}
}

// TestOpsPprof: --pprof serves Go's profiler on the metrics listener, and
// needs one.
func TestOpsPprof(t *testing.T) {
	if _, err := parseFlags([]string{"--pprof"}, io.Discard); err == nil || !strings.Contains(err.Error(), "pprof") {
		t.Errorf("--pprof without --metrics-addr: %v", err)
	}
	n := startOpsNode(t, "--in-memory", "--pprof")
	if code, body := httpGet(n.metrics + "/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Errorf("/debug/pprof/goroutine: %d %.80q", code, body)
	}
}

// TestOpsRaftTLSNode: a durable node whose Raft and forward ports use
// mutual TLS; its Raft metrics; a stranger refused; OOM through the log.
func TestOpsRaftTLSNode(t *testing.T) {
	certs := testcerts.Generate(t, t.TempDir())
	raftAddr := freeAddr(t)
	fwdAddr := freeAddr(t)
	n := startOpsNode(t, "--data-dir", t.TempDir(), "--raft-addr", raftAddr, "--forward-addr", fwdAddr,
		"--raft-tls-cert-file", certs.Cert, "--raft-tls-key-file", certs.Key, "--raft-tls-ca-cert-file", certs.CA,
		"--maxmemory", "1kb")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: n.resp, MaxRetries: -1})
	defer c.Close()
	created := 0
	for i := range 100 {
		err := c.Do(ctx, "RL.FIXED", fmt.Sprint("k", i), 5, "1h").Err()
		if err != nil {
			if err.Error() != "OOM command not allowed when used memory > 'maxmemory'." {
				t.Fatalf("key %d: %v", i, err)
			}
			break
		}
		created++
	}
	// 56 bytes a key, plus 80 for its rule in each shard it lands in.
	if created < 1024/(56+80) || created > 1024/56 {
		t.Fatalf("%d keys fit in 1 KiB", created)
	}
	if r, err := c.Do(ctx, "RL.FIXED", "k0", 5, "1h").Int64Slice(); err != nil || r[2] != 3 {
		t.Fatalf("an old key: %v %v", r, err)
	}
	m := n.scrape(t)
	metricsDocumented(t, m)
	wantMetrics(t, m, map[string]float64{
		"sluice_raft_state,state=leader": 1,
		"sluice_raft_leader_known":       1,
		"sluice_maxmemory_bytes":         1024,
		"sluice_oom_rejections_total":    1,
	})
	if m["sluice_raft_applied_index"] < float64(created) || m["sluice_raft_apply_duration_seconds"] < 1 {
		t.Errorf("raft metrics: applied %v, apply observations %v", m["sluice_raft_applied_index"], m["sluice_raft_apply_duration_seconds"])
	}
	// A peer with another CA's certificate is refused on both ports.
	foreign := testcerts.KeyPair(t, certs.ForeignCert, certs.ForeignKey)
	for _, addr := range []string{raftAddr, fwdAddr} {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: testcerts.Pool(t, certs.CA),
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &foreign, nil }})
		if err != nil {
			continue
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = conn.Write([]byte("SLFW\x01"))
		var b [1]byte
		if _, err := conn.Read(b[:]); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("%s: a foreign certificate got %v", addr, err)
		}
		conn.Close()
	}
}
