package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testcerts"
)

// Tests of what deployments rely on: sluice version, the health check, the
// sd_notify datagrams and the certificate reload. The process-level tests
// (the real binary under NOTIFY_SOCKET, in an image) are in deploy/.

// listenNotify listens on a unixgram socket as systemd does for
// NOTIFY_SOCKET and returns its name and a function reading one datagram.
func listenNotify(t *testing.T, name string) func() string {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return func() string {
		t.Helper()
		buf := make([]byte, 4096)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no datagram: %v", err)
		}
		return string(buf[:n])
	}
}

func TestNotifierDatagrams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.sock")
	read := listenNotify(t, path)
	abstract := "@sluice-test-" + strings.ReplaceAll(t.Name(), "/", "-") + time.Now().Format("150405.000000000")
	readAbstract := listenNotify(t, "\x00"+abstract[1:])
	for _, tc := range []struct {
		socket string
		read   func() string
	}{{path, read}, {abstract, readAbstract}} {
		sd := notifier{socket: tc.socket}
		for _, state := range []string{"READY=1\nSTATUS=serving", "STOPPING=1"} {
			if err := sd.notify(state); err != nil {
				t.Fatalf("%s: %v", tc.socket, err)
			}
			if got := tc.read(); got != state {
				t.Errorf("%s: got %q, want %q", tc.socket, got, state)
			}
		}
	}
	if err := (notifier{}).notify("READY=1"); err != nil {
		t.Errorf("no NOTIFY_SOCKET must send nothing and succeed: %v", err)
	}
	if err := (notifier{socket: filepath.Join(t.TempDir(), "absent")}).notify("READY=1"); err == nil {
		t.Error("a socket nobody listens on: no error")
	}
}

// readyAfter is not ready for its first n calls.
type readyAfter struct{ n int }

func (r *readyAfter) Ready() error {
	if r.n > 0 {
		r.n--
		if r.n > 2 {
			return errors.New("no leader ready")
		}
		return errors.New("loading")
	}
	return nil
}

func TestWaitServing(t *testing.T) {
	var statuses []string
	r := &readyAfter{n: 5}
	if err := waitServing(context.Background(), r, time.Millisecond, func(s string) { statuses = append(statuses, s) }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"no leader ready", "loading"}; strings.Join(statuses, "|") != strings.Join(want, "|") {
		t.Errorf("statuses %q, want each change once: %q", statuses, want)
	}
	if err := waitServing(context.Background(), struct{}{}, time.Millisecond, nil); err != nil {
		t.Errorf("an executor without Ready serves at once: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := waitServing(ctx, &readyAfter{n: 1 << 30}, time.Millisecond, func(string) {}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("never ready: %v, want the context's error", err)
	}
}

// TestChooseBuild: the version -ldflags set wins; without it, the module
// version Go recorded ("go install ...@v0.2.0"), else "dev"; the commit
// likewise from vcs.revision.
func TestChooseBuild(t *testing.T) {
	vcs := func(main string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/sluice-rl/sluice", Version: main}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	for _, tc := range []struct {
		name                string
		ldVersion, ldCommit string
		bi                  *debug.BuildInfo
		version, commit     string
		dirty               bool
	}{
		{"go install @v0.2.0", "dev", "", vcs("v0.2.0"), "v0.2.0", "", false},
		{"go install @commit", "dev", "", vcs("v0.2.1-0.20261129001500-0631f27abcde"), "v0.2.1-0.20261129001500-0631f27abcde", "", false},
		{"go build in a checkout", "dev", "", vcs("v0.2.1-0.20261129001500-0631f27abcde+dirty", "vcs.revision", "0631f27abcdef", "vcs.modified", "true"),
			"v0.2.1-0.20261129001500-0631f27abcde+dirty", "0631f27abcdef", true},
		{"go build without vcs", "dev", "", vcs("(devel)"), "dev", "", false},
		{"no build information", "dev", "", nil, "dev", "", false},
		{"make build", "v0.2.0-3-gabcdef", "abcdef0123", vcs("(devel)", "vcs.revision", "ffff", "vcs.modified", "true"), "v0.2.0-3-gabcdef", "abcdef0123", false},
		{"make build, dirty", "v0.2.0-dirty", "abcdef0123", vcs("v0.2.0"), "v0.2.0-dirty", "abcdef0123", true},
	} {
		b := chooseBuild(tc.ldVersion, tc.ldCommit, tc.bi, "go1.26.8", "linux/amd64")
		if b.Version != tc.version || b.Commit != tc.commit || b.Dirty != tc.dirty || b.GoVersion != "go1.26.8" || b.Platform != "linux/amd64" {
			t.Errorf("%s: %+v, want version %q commit %q dirty %v", tc.name, b, tc.version, tc.commit, tc.dirty)
		}
	}
}

func TestVersionCommand(t *testing.T) {
	var out bytes.Buffer
	code, ok := runToolCommand(context.Background(), []string{"version"}, &out, &out)
	if !ok || code != 0 {
		t.Fatalf("sluice version: ok %v code %d", ok, code)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || lines[0] != "sluice "+currentBuild().Version || !strings.HasPrefix(lines[1], "commit ") || !strings.HasPrefix(lines[2], "go1.") {
		t.Errorf("sluice version printed %q", out.String())
	}
	if _, ok := runToolCommand(context.Background(), []string{"--addr", "x"}, &out, &out); ok {
		t.Error("a server command line taken for a subcommand")
	}
	for _, tc := range []struct {
		b    buildInfo
		sha  string
		line string
	}{
		{buildInfo{Version: "v1.2.0", Commit: "abc123", GoVersion: "go1.26.8", Platform: "linux/amd64"}, "abc123", "commit abc123\n"},
		{buildInfo{Version: "dev"}, "00000000", "commit unknown\n"},
		{buildInfo{Version: "v1", Commit: "abc", Dirty: true}, "abc", "commit abc (dirty)\n"},
	} {
		if got := tc.b.gitSHA1(); got != tc.sha {
			t.Errorf("%+v: gitSHA1 %q, want %q", tc.b, got, tc.sha)
		}
		if !strings.Contains(tc.b.String(), tc.line) {
			t.Errorf("%+v: %q lacks %q", tc.b, tc.b.String(), tc.line)
		}
	}
}

func TestHealthcheckFlags(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "sluice.conf")
	if err := os.WriteFile(conf, []byte("# a server's file\naddr 0.0.0.0:6400\nmetrics-addr 10.0.0.5:9121\nrequirepass \"s3cret pw\"\nmaxmemory 1gb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_PASSWORD", "from-env")
	for _, tc := range []struct {
		args []string
		want healthcheckConfig
	}{
		{nil, healthcheckConfig{Addr: "127.0.0.1:6379", Password: "from-env", Timeout: 3 * time.Second}},
		{[]string{"--config", conf}, healthcheckConfig{Addr: "0.0.0.0:6400", MetricsAddr: "10.0.0.5:9121", Password: "s3cret pw", Timeout: 3 * time.Second}},
		{[]string{"--config", conf, "--metrics-addr", "", "--requirepass", "x", "--timeout", "1s"},
			healthcheckConfig{Addr: "0.0.0.0:6400", Password: "x", Timeout: time.Second}},
	} {
		got, err := parseHealthcheckFlags(tc.args, &bytes.Buffer{})
		if err != nil || *got != tc.want {
			t.Errorf("%q: %+v %v, want %+v", tc.args, got, err, tc.want)
		}
	}
	for _, bad := range [][]string{{"--timeout", "0s"}, {"extra"}, {"--config", filepath.Join(t.TempDir(), "absent")}} {
		if _, err := parseHealthcheckFlags(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	for in, want := range map[string]string{"0.0.0.0:6379": "127.0.0.1:6379", ":6379": "127.0.0.1:6379", "[::]:6379": "[::1]:6379", "10.1.2.3:6379": "10.1.2.3:6379"} {
		if got := dialable(in); got != want {
			t.Errorf("dialable(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHealthcheckProbes runs the probe against a /readyz that answers 200
// then 503, a RESP server that answers PONG only after AUTH, and nothing.
func TestHealthcheckProbes(t *testing.T) {
	ready := true
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("not ready: no leader ready\n"))
			return
		}
		w.Write([]byte("ready\n"))
	}))
	defer hs.Close()
	metrics := strings.TrimPrefix(hs.URL, "http://")
	probe := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := runHealthcheck(context.Background(), append(args, "--timeout", "2s"), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	if code, out := probe("--metrics-addr", metrics); code != 0 || !strings.Contains(out, "ready") {
		t.Errorf("ready node: %d %q", code, out)
	}
	ready = false
	if code, out := probe("--metrics-addr", metrics); code != 1 || !strings.Contains(out, "503: no leader ready") {
		t.Errorf("node without a leader: %d %q", code, out)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				authed := false
				buf := make([]byte, 512)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					switch req := string(buf[:n]); {
					case strings.Contains(req, "AUTH") && strings.Contains(req, "pw"):
						authed = true
						c.Write([]byte("+OK\r\n"))
					case strings.Contains(req, "AUTH"):
						c.Write([]byte("-WRONGPASS invalid username-password pair or user is disabled.\r\n"))
					case authed:
						c.Write([]byte("+PONG\r\n"))
					default:
						c.Write([]byte("-NOAUTH Authentication required.\r\n"))
					}
				}
			}()
		}
	}()
	addr := ln.Addr().String()
	if code, out := probe("--addr", addr, "--requirepass", "pw"); code != 0 || !strings.Contains(out, "PONG") {
		t.Errorf("PING with the password: %d %q", code, out)
	}
	if code, out := probe("--addr", addr, "--requirepass", ""); code != 1 || !strings.Contains(out, "NOAUTH") {
		t.Errorf("PING without the password: %d %q", code, out)
	}
	if code, out := probe("--addr", addr, "--requirepass", "bad"); code != 1 || !strings.Contains(out, "WRONGPASS") {
		t.Errorf("PING with a wrong password: %d %q", code, out)
	}
	ln.Close()
	if code, _ := probe("--addr", addr, "--requirepass", ""); code != 1 {
		t.Errorf("nothing listening: exit %d, want 1", code)
	}
	if code, _ := probe("--bogus"); code != 2 {
		t.Errorf("a bad flag: exit %d, want 2", code)
	}
}

// TestReloadCertificates: a TLS configuration set up through a reloadSet
// serves the new certificate after reload, and keeps the old one when the
// new files do not load.
func TestReloadCertificates(t *testing.T) {
	dir := t.TempDir()
	for _, sub := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	a, b := testcerts.Generate(t, filepath.Join(dir, "a")), testcerts.Generate(t, filepath.Join(dir, "b"))
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	copyFile := func(from, to string) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(a.Cert, cert)
	copyFile(a.Key, key)
	var set reloadSet
	cfg := &tls.Config{}
	if err := set.use(cfg, cert, key); err != nil {
		t.Fatal(err)
	}
	served := func() []byte {
		c, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		cc, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil || !bytes.Equal(cc.Certificate[0], c.Certificate[0]) {
			t.Fatalf("client side differs from server side: %v", err)
		}
		return c.Certificate[0]
	}
	before := served()
	copyFile(b.Cert, cert)
	copyFile(b.Key, key)
	if n, err := set.reload(); n != 1 || err != nil {
		t.Fatalf("reload: %d %v", n, err)
	}
	after := served()
	if bytes.Equal(before, after) {
		t.Fatal("the certificate did not change on reload")
	}
	copyFile(a.Cert, cert) // a's certificate with b's key: does not load
	if n, err := set.reload(); n != 0 || err == nil {
		t.Fatalf("reload of a mismatched pair: %d %v", n, err)
	}
	if !bytes.Equal(served(), after) {
		t.Error("a failed reload replaced the certificate")
	}
}

func TestCheckConfigCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"check-config", "--addr", "127.0.0.1:6400", "--in-memory"}, 0, "configuration OK"},
		{[]string{"check-config", "--addr", "0.0.0.0:6400"}, 1, "DENIED"},
		{[]string{"check-config", "--shards", "0"}, 1, "--shards"},
		{[]string{"check-config", "--no-such-flag"}, 1, "no-such-flag"},
	} {
		var out bytes.Buffer
		code, ok := runToolCommand(context.Background(), tc.args, &out, &out)
		if !ok || code != tc.code || !strings.Contains(out.String(), tc.out) {
			t.Errorf("%q: ok %v, exit %d, %q; want exit %d with %q", tc.args, ok, code, out.String(), tc.code, tc.out)
		}
	}
}
