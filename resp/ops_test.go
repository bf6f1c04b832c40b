package resp

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/testcerts"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// tlsServer runs a server with a plain and a TLS listener; clientCA makes
// client certificates required.
func tlsServer(t *testing.T, certs testcerts.Set, clientCA bool) (srv *Server, plain, secure string) {
	return tlsServerWith(t, certs, clientCA, Config{})
}

func tlsServerWith(t *testing.T, certs testcerts.Set, clientCA bool, scfg Config) (srv *Server, plain, secure string) {
	t.Helper()
	eng := engine.New(engine.Config{Stripes: 4})
	scfg.Engine = eng
	srv = NewServer(scfg, NewLocalExecutor(eng, nil))
	cfg := &tls.Config{Certificates: []tls.Certificate{testcerts.KeyPair(t, certs.Cert, certs.Key)}}
	if clientCA {
		cfg.ClientCAs = testcerts.Pool(t, certs.CA)
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()
	go func() { served <- srv.ServeTLS(tln, cfg) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
		for range 2 {
			if err := <-served; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	})
	return srv, ln.Addr().String(), tln.Addr().String()
}

// TestTLSListener: one server, a plain and a TLS listener, both parsed alike;
// go-redis speaks to the TLS one with the CA.
func TestTLSListener(t *testing.T) {
	certs := testcerts.Generate(t, t.TempDir())
	srv, plain, secure := tlsServer(t, certs, false)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: secure, Protocol: 3, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: testcerts.Pool(t, certs.CA), ServerName: "127.0.0.1"}})
	defer c.Close()
	got, err := c.Do(ctx, "RL.TOKEN", "k", "2", "1/s").Int64Slice()
	if err != nil || len(got) != 5 || got[0] != 1 || got[2] != 1 {
		t.Fatalf("RL.TOKEN over TLS: %v %v", got, err)
	}
	// Both listeners share the engine.
	if r := rawDial(t, plain).do(t, "RL.PEEK", "k"); !strings.HasPrefix(string(r), "*5 [:1 :2 :1 :0 :") {
		t.Fatalf("RL.PEEK on the plain listener: %q", r)
	}
	// The parser runs behind TLS too: a protocol violation closes the
	// connection with Redis's error.
	conn, err := tls.Dial("tcp", secure, &tls.Config{RootCAs: testcerts.Pool(t, certs.CA), ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("*1\r\n$99999999999\r\n")); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(conn).ReadString('\n')
	if !strings.HasPrefix(line, "-ERR Protocol error") {
		t.Fatalf("parser behind TLS replied %q", line)
	}
	if srv.TLSAddr().String() != secure || srv.Addr().String() != plain {
		t.Fatalf("addresses: %v %v", srv.Addr(), srv.TLSAddr())
	}
	// A plain-text client on the TLS port gets nothing it can use.
	raw, err := net.DialTimeout("tcp", secure, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = raw.Write([]byte(encode("PING")))
	if line, _ := bufio.NewReader(raw).ReadString('\n'); strings.Contains(line, "PONG") {
		t.Fatal("plain text answered on the TLS port")
	}
}

// TestTLSClientCertificates: with a client CA, only clients with a
// certificate it signed are served.
func TestTLSClientCertificates(t *testing.T) {
	certs := testcerts.Generate(t, t.TempDir())
	_, _, secure := tlsServer(t, certs, true)
	ctx := context.Background()
	roots := testcerts.Pool(t, certs.CA)
	dial := func(cert *tls.Certificate) error {
		cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
		if cert != nil {
			// Presented whatever the server asks for (Go would otherwise
			// send no certificate the server's CA did not sign).
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		c := redis.NewClient(&redis.Options{Addr: secure, MaxRetries: -1, TLSConfig: cfg, DialTimeout: 2 * time.Second})
		defer c.Close()
		return c.Ping(ctx).Err()
	}
	good := testcerts.KeyPair(t, certs.ClientCert, certs.ClientKey)
	if err := dial(&good); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if err := dial(nil); err == nil {
		t.Fatal("served a client without a certificate")
	}
	foreign := testcerts.KeyPair(t, certs.ForeignCert, certs.ForeignKey)
	if err := dial(&foreign); err == nil {
		t.Fatal("served a client with a certificate from another CA")
	}
}

// TestTLSMaxClients: --maxclients counts TLS clients too, and a TLS client
// past it reads Redis's error; a client that never sends a TLS hello does
// not hold up the refusals.
func TestTLSMaxClients(t *testing.T) {
	certs := testcerts.Generate(t, t.TempDir())
	_, _, secure := tlsServerWith(t, certs, false, Config{MaxClients: 1})
	cfg := &tls.Config{RootCAs: testcerts.Pool(t, certs.CA), ServerName: "localhost"}
	first, err := tls.Dial("tcp", secure, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_ = first.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := first.Write([]byte(encode("PING"))); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(first).ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("first client: %q", line)
	}
	silent, err := net.Dial("tcp", secure) // connects, never says hello
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	second, err := tls.Dial("tcp", secure, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	_ = second.SetDeadline(time.Now().Add(5 * time.Second))
	if line, _ := bufio.NewReader(second).ReadString('\n'); line != "-ERR max number of clients reached\r\n" {
		t.Fatalf("past maxclients: %q", line)
	}
}

// TestCloseBothListeners: Close stops every listener, even one whose Serve
// had not started yet.
func TestCloseBothListeners(t *testing.T) {
	certs := testcerts.Generate(t, t.TempDir())
	srv, plain, secure := tlsServer(t, certs, false)
	// Both serving (until then the kernel accepts on the sockets anyway).
	rawDial(t, plain).do(t, "PING").expect(t, "+PONG")
	testkit.Eventually(t, 5*time.Second, time.Millisecond, func() error {
		if srv.TLSAddr() == nil {
			return errors.New("no TLS listener")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{plain, secure} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Fatalf("%s still accepts after Close", addr)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(ln); err != nil { // after Close: returns at once
		t.Fatal(err)
	}
}

// gather returns the registry's metric families by name.
func gather(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*dto.MetricFamily)
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// value returns the value of the family's metric whose labels match.
func value(mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	mf := mfs[name]
	if mf == nil {
		return -1
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

// TestMetricsAndInfo: decisions are counted by command and result, once per
// pipeline, and INFO reports the same counts.
func TestMetricsAndInfo(t *testing.T) {
	eng := engine.New(engine.Config{Stripes: 4, MaxKeys: 2})
	srv, addr := serveEngine(t, Config{}, eng)
	c := rawDial(t, addr)
	// One pipeline: 3 allowed, 1 denied, 1 bad argument, 1 OOM (a third
	// key), a CL.THROTTLE, a peek, an unknown command.
	c.send(t, encode("RL.TOKEN", "a", "3", "3/m")+encode("RL.TOKEN", "a", "3", "3/m")+encode("RL.TOKEN", "a", "3", "3/m")+
		encode("RL.TOKEN", "a", "3", "3/m")+encode("RL.TOKEN", "a", "0", "3/m")+encode("CL.THROTTLE", "b", "1", "1", "60")+
		encode("RL.FIXED", "c", "5", "1m")+encode("RL.PEEK", "a")+encode("NOPE"))
	want := []string{"*5 [:1 :3 :2 :0 :20000]", "*5 [:1 :3 :1 :0 :40000]", "*5 [:1 :3 :0 :0 :60000]",
		"*5 [:0 :3 :0 :20000 :60000]", "-ERR invalid capacity '0': must be at least 1", "*5 [:0 :2 :1 :-1 :60]",
		"-OOM command not allowed: the key limit is reached (max-keys 2)", "*5 [:1 :3 :0 :0 :60000]"}
	for _, w := range want {
		c.read(t).expect(t, w)
	}
	if r := c.read(t); !strings.HasPrefix(string(r), "-ERR unknown command 'NOPE'") {
		t.Fatalf("unknown command: %q", r)
	}
	mfs := gather(t, srv.Collector())
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_decisions_total", []string{"command", "rl.token", "result", "allowed"}, 3},
		{"sluice_decisions_total", []string{"command", "rl.token", "result", "denied"}, 1},
		{"sluice_decisions_total", []string{"command", "rl.token", "result", "error"}, 1},
		{"sluice_decisions_total", []string{"command", "cl.throttle", "result", "allowed"}, 1},
		{"sluice_decisions_total", []string{"command", "rl.fixed", "result", "error"}, 1},
		{"sluice_decisions_total", []string{"command", "rl.sliding", "result", "allowed"}, 0},
		{"sluice_commands_total", []string{"command", "rl.token"}, 5},
		{"sluice_commands_total", []string{"command", "other"}, 1},
		{"sluice_commands_total", []string{"command", "rl.peek"}, 1},
		{"sluice_command_errors_total", []string{"command", "rl.token"}, 1},
		{"sluice_command_duration_seconds", []string{"command", "rl.token"}, 1}, // once per pipeline
		{"sluice_oom_rejections_total", nil, 1},
		{"sluice_keys", nil, 2},
		{"sluice_max_keys", nil, 2},
		{"sluice_connected_clients", nil, 1},
		{"sluice_engine_memory_bytes", nil, float64(eng.MemoryBytes())},
	}
	for _, ch := range checks {
		if got := value(mfs, ch.name, ch.labels...); got != ch.want {
			t.Errorf("%s%v = %v, want %v", ch.name, ch.labels, got, ch.want)
		}
	}
	info := string(c.do(t, "INFO", "stats", "memory", "commandstats"))
	for _, w := range []string{"total_decisions_allowed:4", "total_decisions_denied:1", "total_decisions_errors:2",
		"total_oom_rejections:1", "total_error_replies:3", "max_keys:2", "maxmemory:0",
		"cmdstat_rl.token:calls=5,", "failed_calls=1,allowed=3,denied=1"} {
		if !strings.Contains(info, w) {
			t.Errorf("INFO lacks %q:\n%s", w, info)
		}
	}
	if strings.Contains(string(c.do(t, "INFO")), "Commandstats") {
		t.Error("INFO without arguments includes commandstats")
	}
}

// TestMetricsNoAllocs: counting a pipeline's commands allocates nothing.
func TestMetricsNoAllocs(t *testing.T) {
	eng := engine.New(engine.Config{Stripes: 4})
	srv := NewServer(Config{}, NewLocalExecutor(eng, nil))
	c := &client{results: make([]engine.Result, 1)}
	st := srv.commands["rl.token"].stats
	p := &pending{stats: st, deferred: true, opStart: 0, opEnd: 1}
	failure := errors.New("CLUSTERDOWN x")
	allocs := testing.AllocsPerRun(100, func() {
		c.count(p, nil)
		c.count(p, failure)
		srv.flushTallies(c, time.Millisecond)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per pipeline", allocs)
	}
}
