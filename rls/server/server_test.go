package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	pbstruct "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	pbtype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/internal/testcerts"
	"github.com/sluice-rl/sluice/rls"
)

type memExec struct {
	mu sync.Mutex
	e  *engine.Engine
}

func (m *memExec) Execute(_ context.Context, ops []engine.Op, results []engine.Result) error {
	m.e.Apply(time.Now().UnixNano(), ops, results)
	return nil
}

func newConfig(t *testing.T) Config {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	svc, err := rls.New(rls.Config{Dir: "../testdata/config", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return Config{Service: svc, Exec: &memExec{e: engine.New(engine.Config{Stripes: 4})}, Log: log}
}

func entries(kv ...string) []*pbstruct.RateLimitDescriptor_Entry {
	var out []*pbstruct.RateLimitDescriptor_Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, &pbstruct.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

func TestGRPC(t *testing.T) {
	g, err := ListenGRPC("127.0.0.1:0", newConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	conn, err := grpc.NewClient(g.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	ctx := context.Background()
	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hr, err)
	}

	// Envoy's shapes: nested descriptors, a descriptor's hits_addend, a
	// limit override.
	r, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "api", HitsAddend: 2, Descriptors: []*pbstruct.RateLimitDescriptor{
		{Entries: entries("client", "mobile", "route", "r")},
		{Entries: entries("path", "/login"), HitsAddend: wrapperspb.UInt64(4)},
		{Entries: entries("remote_address", "1.1.1.1"), Limit: &pbstruct.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: pbtype.RateLimitUnit_MINUTE}},
		{Entries: entries("internal", "x")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r.OverallCode != pb.RateLimitResponse_OK || len(r.Statuses) != 4 {
		t.Fatalf("response %v", r)
	}
	want := []struct {
		remain uint32
		rpu    uint32
		unit   pb.RateLimitResponse_RateLimit_Unit
		name   string
	}{{0, 2, pb.RateLimitResponse_RateLimit_MINUTE, ""}, {0, 0, 0, ""} /* replaced by internal */, {1, 3, pb.RateLimitResponse_RateLimit_MINUTE, ""}, {4294967295, 0, 0, ""}}
	for i, w := range want {
		s := r.Statuses[i]
		if s.LimitRemaining != w.remain || s.GetCurrentLimit().GetRequestsPerUnit() != w.rpu || s.GetCurrentLimit().GetUnit() != w.unit || s.GetCurrentLimit().GetName() != w.name {
			t.Errorf("status %d: %v, want %+v", i, s, w)
		}
		if w.rpu > 0 && (s.DurationUntilReset.GetSeconds() < 1 || s.DurationUntilReset.GetSeconds() > 60) {
			t.Errorf("status %d: duration_until_reset %v", i, s.DurationUntilReset)
		}
	}
	r, err = c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "api", Descriptors: []*pbstruct.RateLimitDescriptor{
		{Entries: entries("path", "/login"), HitsAddend: wrapperspb.UInt64(6)},
	}})
	if err != nil || r.OverallCode != pb.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("over limit: %v %v", r, err)
	}
	for _, bad := range []*pb.RateLimitRequest{
		{Domain: "", Descriptors: []*pbstruct.RateLimitDescriptor{{Entries: entries("a", "b")}}},
		{Domain: "api"},
	} {
		_, err := c.ShouldRateLimit(ctx, bad)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", bad, err)
		}
	}
}

func TestHTTPJSON(t *testing.T) {
	h, err := ListenHTTP("127.0.0.1:0", newConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	post := func(body string) (int, map[string]any) {
		t.Helper()
		res, err := http.Post("http://"+h.Addr()+"/json", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return res.StatusCode, m
	}
	req := `{"domain":"api","descriptors":[{"entries":[{"key":"path","value":"/login"}],"hitsAddend":"5"}]}`
	code, m := post(req)
	if code != 200 || m["overallCode"] != "OK" {
		t.Fatalf("first: %d %v", code, m)
	}
	st := m["statuses"].([]any)[0].(map[string]any)
	if st["currentLimit"].(map[string]any)["requestsPerUnit"] != float64(5) || st["currentLimit"].(map[string]any)["name"] != "login" {
		t.Fatalf("status %v", st)
	}
	code, m = post(req)
	if code != 429 || m["overallCode"] != "OVER_LIMIT" {
		t.Fatalf("second: %d %v", code, m)
	}
	for _, bad := range []string{`{"domain":""}`, `not json`, `{"domain":"api"}`, `{"domain":"api","bogus":1}`} {
		if code, _ := post(bad); code != 400 {
			t.Errorf("%s: %d, want 400", bad, code)
		}
	}
	res, err := http.Get("http://" + h.Addr() + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "OK" {
		t.Fatalf("/healthcheck: %d %q", res.StatusCode, b)
	}
	res, err = http.Get("http://" + h.Addr() + "/json")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", res.StatusCode)
	}
}

func TestMutualTLS(t *testing.T) {
	certs := testcerts.Generate(t, t.TempDir())
	cfg := newConfig(t)
	cfg.TLS = &tls.Config{Certificates: []tls.Certificate{testcerts.KeyPair(t, certs.Cert, certs.Key)},
		ClientCAs: testcerts.Pool(t, certs.CA), ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	g, err := ListenGRPC("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	call := func(c *tls.Config) error {
		conn, err := grpc.NewClient(g.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(c)))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "api", Descriptors: []*pbstruct.RateLimitDescriptor{{Entries: entries("a", "b")}}})
		return err
	}
	good := &tls.Config{RootCAs: testcerts.Pool(t, certs.CA), Certificates: []tls.Certificate{testcerts.KeyPair(t, certs.ClientCert, certs.ClientKey)}, ServerName: "127.0.0.1"}
	if err := call(good); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if err := call(&tls.Config{RootCAs: testcerts.Pool(t, certs.CA), ServerName: "127.0.0.1"}); err == nil {
		t.Fatal("a client without a certificate was served")
	}

	// POST /json over the same TLS configuration.
	h, err := ListenHTTP("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	post := func(c *tls.Config) (int, error) {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: c}, Timeout: 5 * time.Second}
		res, err := hc.Post("https://"+h.Addr()+"/json", "application/json", bytes.NewBufferString(`{"domain":"api","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`))
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}
	if code, err := post(good); err != nil || code != http.StatusOK {
		t.Fatalf("HTTPS with a client certificate: %d %v", code, err)
	}
	if _, err := post(&tls.Config{RootCAs: testcerts.Pool(t, certs.CA), ServerName: "127.0.0.1"}); err == nil {
		t.Fatal("HTTPS without a client certificate was served")
	}
}

// BenchmarkHandler: one ShouldRateLimit call past gRPC's transport, as the
// server runs it on an in-memory engine: Envoy's request converted, matched,
// decided and turned into Envoy's response. Requests of 1 and 3
// descriptors under the rules cmd/sluice-rls-load/compare.sh serves (one
// key per descriptor, limits never reached); the values vary over 1024, so
// keys are found and made as in that load test.
func BenchmarkHandler(b *testing.B) {
	dir := b.TempDir()
	yaml := "domain: bench\ndescriptors:\n"
	for d := range 3 {
		yaml += "  - key: d" + strconv.Itoa(d) + "\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(yaml), 0o600); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 3} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			log := slog.New(slog.DiscardHandler)
			svc, err := rls.New(rls.Config{Dir: dir, Log: log})
			if err != nil {
				b.Fatal(err)
			}
			h := &handler{cfg: withDefaults(Config{Service: svc, Exec: &memExec{e: engine.New(engine.Config{Stripes: 16})}, Timeout: -1, Log: log})} // as cmd/sluice runs it in memory
			req := &pb.RateLimitRequest{Domain: "bench"}
			for d := range n {
				k := "d" + strconv.Itoa(d)
				req.Descriptors = append(req.Descriptors, &pbstruct.RateLimitDescriptor{Entries: entries(k, "")})
			}
			values := make([]string, 1024)
			for i := range values {
				values[i] = "v" + strconv.Itoa(i)
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				for _, d := range req.Descriptors {
					d.Entries[0].Value = values[i&1023]
				}
				i++
				if _, err := h.ShouldRateLimit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// deadlineExec records the deadline of the context it runs under.
type deadlineExec struct {
	memExec
	deadline time.Time
	has      bool
}

func (d *deadlineExec) Execute(ctx context.Context, ops []engine.Op, results []engine.Result) error {
	d.deadline, d.has = ctx.Deadline()
	return d.memExec.Execute(ctx, ops, results)
}

// TestDecisionDeadline: a decision runs under the server's Timeout, unless
// the caller's deadline ends sooner, and under none when the Timeout is
// negative (the in-memory executor, which never waits).
func TestDecisionDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		caller  time.Duration // 0: no deadline
		want    time.Duration // 0: no deadline
	}{
		{"server's", time.Minute, 0, time.Minute},
		{"caller's sooner", time.Minute, time.Second, time.Second},
		{"caller's later", time.Second, time.Minute, time.Second},
		{"none in memory", -1, 0, 0},
		{"caller's in memory", -1, time.Minute, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := newConfig(t)
			ex := &deadlineExec{memExec: memExec{e: engine.New(engine.Config{Stripes: 4})}}
			cfg.Exec, cfg.Timeout = ex, tc.timeout
			h := &handler{cfg: withDefaults(cfg)}
			ctx := context.Background()
			if tc.caller > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.caller)
				defer cancel()
			}
			start := time.Now()
			req := &pb.RateLimitRequest{Domain: "api", Descriptors: []*pbstruct.RateLimitDescriptor{{Entries: entries("remote_address", "10.0.0.1")}}}
			if _, err := h.ShouldRateLimit(ctx, req); err != nil {
				t.Fatal(err)
			}
			if tc.want == 0 {
				if ex.has {
					t.Fatalf("a deadline %v ahead, want none", ex.deadline.Sub(start))
				}
				return
			}
			if !ex.has {
				t.Fatalf("no deadline, want one %v ahead", tc.want)
			}
			if d := ex.deadline.Sub(start); d > tc.want+time.Second/4 || d < tc.want-time.Second/4 {
				t.Fatalf("deadline %v ahead, want %v", d, tc.want)
			}
		})
	}
}

// TestTransientRefusalsAreUnavailable: a refusal that passes by itself (no
// leader yet, a cluster version still being raised, a node loading,
// stopping, halted or unable to write) is UNAVAILABLE, which gRPC clients
// retry, and 503 on /json; never INTERNAL.
func TestTransientRefusalsAreUnavailable(t *testing.T) {
	for _, c := range []errcode.Code{errcode.ClusterDown, errcode.ShuttingDown, errcode.Loading,
		errcode.ClusterVersion, errcode.ApplyHalted, errcode.LogWriteFailed, errcode.Removed} {
		if got := status.Code(grpcError(&errcode.Error{Code: c, Num: 2, Detail: "1"})); got != codes.Unavailable {
			t.Errorf("%s: %s, want Unavailable", c, got)
		}
	}
	if got := status.Code(grpcError(&errcode.Error{Code: errcode.CommitTimeout})); got != codes.Unknown {
		t.Errorf("a refusal that may have applied: %s, want Unknown", got)
	}
}
