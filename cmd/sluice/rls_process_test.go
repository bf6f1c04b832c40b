package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pbstruct "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	pbtype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/testkit"
)

// The process tests of Envoy's rate limit service: three nodes with
// --shards 3, a gRPC client on every node, one limit shared exactly.

const rlsClusterRules = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 30}
  - key: tenant
    descriptors:
      - key: route
        rate_limit: {unit: hour, requests_per_unit: 20}
`

func rlsEntries(kv ...string) []*pbstruct.RateLimitDescriptor_Entry {
	var out []*pbstruct.RateLimitDescriptor_Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, &pbstruct.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// newRLSCluster starts three nodes serving the rate limit service (extra
// flags added) with the rules file name holding rules, and returns once
// they serve at the newest cluster version, with each node's gRPC address
// by node ID.
func newRLSCluster(t *testing.T, name, rules string, extra ...string) (*testCluster, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddrs := map[string]string{}
	c := newTestClusterWith(t, 3, func(nodes []*proc) {
		for _, p := range nodes {
			a := freeAddr(t)
			grpcAddrs[p.ID] = a
			p.Extra = append(p.Extra, extra...)
			p.Extra = append(p.Extra, "--rls-config", dir, "--rls-addr", a)
		}
	})
	c.waitServing(c.nodes...)
	c.waitNewestVersion(c.nodes...)
	return c, grpcAddrs
}

// rlsCallers starts perNode gRPC clients on every node (grpcAddrs by node
// ID), each sending req calls times, one at a time (10 s each), and
// handing each answer to got, which says whether the client goes on; the
// returned wait waits for every client to end.
func (c *testCluster) rlsCallers(grpcAddrs map[string]string, req *pb.RateLimitRequest, perNode, calls int,
	got func(p *proc, r *pb.RateLimitResponse, err error) (more bool)) (wait func()) {
	var wg sync.WaitGroup
	for _, p := range c.nodes {
		cl := rlsClient(c.t, grpcAddrs[p.ID])
		for range perNode {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range calls {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					r, err := cl.ShouldRateLimit(ctx, req)
					cancel()
					if !got(p, r, err) {
						return
					}
				}
			}()
		}
	}
	return wg.Wait
}

func rlsClient(t *testing.T, addr string) pb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn)
}

// TestRLSClusterExactShared: 3 nodes x 4 clients send 120 requests of two
// descriptors (remote_address: 30/hour, tenant+route: 20/hour) to every
// node; exactly 20 are admitted, each charging both counters, whichever
// node they reached, and the counters' remaining agree on every node.
func TestRLSClusterExactShared(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c, grpcAddrs := newRLSCluster(t, "edge.yaml", rlsClusterRules, "--shards", strconv.Itoa(shardCount))
	req := &pb.RateLimitRequest{Domain: "edge", Descriptors: []*pbstruct.RateLimitDescriptor{
		{Entries: rlsEntries("remote_address", "10.0.0.7")},
		{Entries: rlsEntries("tenant", "acme", "route", "/checkout")},
	}}
	var ok, over atomic.Int64
	c.rlsCallers(grpcAddrs, req, 4, 10, func(p *proc, r *pb.RateLimitResponse, err error) bool {
		if err != nil {
			t.Errorf("node %s: %v", p.ID, err)
			return false
		}
		if r.OverallCode == pb.RateLimitResponse_OK {
			ok.Add(1)
		} else {
			over.Add(1)
		}
		return true
	})()
	if ok.Load() != 20 || over.Load() != 100 {
		c.dumpLogs()
		t.Fatalf("%d admitted, %d denied; want exactly 20 and 100", ok.Load(), over.Load())
	}
	// A peek (hits_addend 0) on every node sees the same counts: the
	// denied requests charged nothing.
	peek := &pb.RateLimitRequest{Domain: "edge", Descriptors: []*pbstruct.RateLimitDescriptor{
		{Entries: rlsEntries("remote_address", "10.0.0.7"), HitsAddend: wrapperspb.UInt64(0)},
		{Entries: rlsEntries("tenant", "acme", "route", "/checkout"), HitsAddend: wrapperspb.UInt64(0)},
	}}
	for _, p := range c.nodes {
		r, err := rlsClient(t, grpcAddrs[p.ID]).ShouldRateLimit(context.Background(), peek)
		if err != nil {
			t.Fatal(err)
		}
		if r.Statuses[0].LimitRemaining != 10 || r.Statuses[1].LimitRemaining != 0 {
			t.Fatalf("node %s: remaining %d and %d, want 10 and 0", p.ID, r.Statuses[0].LimitRemaining, r.Statuses[1].LimitRemaining)
		}
	}
	// A limit override (7/hour) and hits_addend, one call per node: 5 fit,
	// 3 more do not, 2 more do.
	override := &pbstruct.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: pbtype.RateLimitUnit_HOUR}
	for i, step := range []struct {
		hits   uint64
		code   pb.RateLimitResponse_Code
		remain uint32
	}{{5, pb.RateLimitResponse_OK, 2}, {3, pb.RateLimitResponse_OVER_LIMIT, 0}, {2, pb.RateLimitResponse_OK, 0}} {
		p := c.nodes[i]
		r, err := rlsClient(t, grpcAddrs[p.ID]).ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "edge", Descriptors: []*pbstruct.RateLimitDescriptor{
			{Entries: rlsEntries("remote_address", "10.0.0.8"), HitsAddend: wrapperspb.UInt64(step.hits), Limit: override},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if r.OverallCode != step.code || r.Statuses[0].LimitRemaining != step.remain || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 7 {
			t.Fatalf("node %s, hits %d: %v", p.ID, step.hits, r)
		}
	}
}

// TestRLSNodeReloadMetrics: one in-memory node with both front ends and
// metrics. A request over gRPC and over HTTP; SIGHUP with a bad file keeps
// the rules and counts the error; SIGHUP with a good one applies it; the
// per-rule metrics and the load errors are scraped, and every sluice_*
// family is named in docs/operations.md.
func TestRLSNodeReloadMetrics(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("edge.yaml", rlsClusterRules)
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	n := startOpsNode(t, "--in-memory", "--rls-config", dir, "--rls-addr", grpcAddr, "--rls-http-addr", httpAddr)
	cl := rlsClient(t, grpcAddr)
	req := &pb.RateLimitRequest{Domain: "edge", Descriptors: []*pbstruct.RateLimitDescriptor{{Entries: rlsEntries("remote_address", "1.2.3.4"), HitsAddend: wrapperspb.UInt64(30)}}}
	r, err := cl.ShouldRateLimit(context.Background(), req)
	if err != nil || r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("gRPC: %v %v", r, err)
	}
	post := func(body string) int {
		t.Helper()
		res, err := http.Post("http://"+httpAddr+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if c := post(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}]}`); c != http.StatusTooManyRequests {
		t.Fatalf("HTTP over limit: %d", c)
	}
	if c := post(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"5.6.7.8"}]}]}`); c != http.StatusOK {
		t.Fatalf("HTTP within limit: %d", c)
	}
	if c := post(`{"domain":""}`); c != http.StatusBadRequest {
		t.Fatalf("HTTP bad request: %d", c)
	}
	rc := redis.NewClient(&redis.Options{Addr: n.resp, Protocol: 2})
	defer rc.Close()
	version := func() string {
		info, err := rc.Info(context.Background(), "rls").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "rls_rules_version:"); ok {
				return v
			}
		}
		t.Fatalf("INFO rls has no version: %q", info)
		return ""
	}
	v1 := version()
	waitFor := func(what string, cond func(m map[string]float64) bool) map[string]float64 {
		t.Helper()
		var m map[string]float64
		testkit.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
			if m = n.scrape(t); !cond(m) {
				return fmt.Errorf("%s: %v", what, m)
			}
			return nil
		})
		return m
	}
	write("bad.yaml", "domain: bad\ndescriptors: [{key: k, quota_mode: true}]\n")
	if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("a bad reload counted", func(m map[string]float64) bool { return m["sluice_rls_config_load_errors_total"] == 1 })
	if version() != v1 {
		t.Fatal("a bad reload changed the rules")
	}
	os.Remove(filepath.Join(dir, "bad.yaml"))
	write("edge.yaml", strings.Replace(rlsClusterRules, "requests_per_unit: 30", "requests_per_unit: 31", 1))
	if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	m := waitFor("a good reload", func(m map[string]float64) bool { return m["sluice_rls_config_loads_total"] == 2 })
	if version() == v1 {
		t.Fatal("a good reload kept the version")
	}
	r, err = cl.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "edge", Descriptors: []*pbstruct.RateLimitDescriptor{{Entries: rlsEntries("remote_address", "1.2.3.4")}}})
	if err != nil || r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("after raising the limit to 31: %v %v", r, err)
	}
	m = n.scrape(t)
	wantMetrics(t, m, map[string]float64{
		"sluice_rls_total_hits_total,domain=edge,rule=edge.remote_address":   33,
		"sluice_rls_within_limit_total,domain=edge,rule=edge.remote_address": 32,
		"sluice_rls_over_limit_total,domain=edge,rule=edge.remote_address":   1,
		"sluice_rls_config_load_errors_total":                                1,
	})
	metricsDocumented(t, m)
}

// TestRLSClusterFailover: clients on every node of three send requests of
// two descriptors (a: 500/hour, b: 60/hour) while the leader is killed.
// Every admitted request is kept (b's count is at least the admissions,
// and exceeds them by no more than the answers that said the outcome is
// unknown), none is admitted beyond b's limit, and a and b are always
// charged together (one atomic step), on every node after the old leader
// rejoins.
func TestRLSClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const rules = "domain: f\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 500}\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 60}\n"
	c, grpcAddrs := newRLSCluster(t, "f.yaml", rules)
	// A frozen, replicated clock: no window ends during the test.
	if err := c.client(c.nodes[0]).Do(context.Background(), "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
		t.Fatal(err)
	}
	req := &pb.RateLimitRequest{Domain: "f", Descriptors: []*pbstruct.RateLimitDescriptor{
		{Entries: rlsEntries("a", "x")}, {Entries: rlsEntries("b", "y")},
	}}
	// unknown counts the calls whose outcome is not known: the service's
	// UNKNOWN (may have been applied), and any error on a connection to
	// the killed node (it may have committed the call, or forwarded it,
	// before it died).
	var admitted, denied, unknown, unavailable atomic.Int64
	var killed atomic.Pointer[string]
	wait := c.rlsCallers(grpcAddrs, req, 3, 40, func(p *proc, r *pb.RateLimitResponse, err error) bool {
		switch {
		case err != nil && killed.Load() != nil && *killed.Load() == p.ID:
			unknown.Add(1) // the node is gone: this client stops
			return false
		case status.Code(err) == codes.Unknown:
			unknown.Add(1)
		case err != nil:
			unavailable.Add(1)
			time.Sleep(20 * time.Millisecond)
		case r.OverallCode == pb.RateLimitResponse_OK:
			admitted.Add(1)
		default:
			denied.Add(1)
		}
		return true
	})
	time.Sleep(150 * time.Millisecond)
	old := c.leader()
	killed.Store(&old.ID)
	c.kill(old)
	wait()
	c.start(old)
	c.waitServing(c.nodes...)
	c.waitNewestVersion(c.nodes...)
	peek := &pb.RateLimitRequest{Domain: "f", Descriptors: []*pbstruct.RateLimitDescriptor{
		{Entries: rlsEntries("a", "x"), HitsAddend: wrapperspb.UInt64(0)},
		{Entries: rlsEntries("b", "y"), HitsAddend: wrapperspb.UInt64(0)},
	}}
	t.Logf("admitted %d, denied %d, unknown outcome %d, unavailable %d", admitted.Load(), denied.Load(), unknown.Load(), unavailable.Load())
	if admitted.Load() > 60 {
		t.Fatalf("%d admitted over a limit of 60", admitted.Load())
	}
	for _, p := range c.nodes {
		var r *pb.RateLimitResponse
		c.settle(20*time.Second, 50*time.Millisecond, "peek on "+p.ID, func() string {
			var err error
			r, err = rlsClient(t, grpcAddrs[p.ID]).ShouldRateLimit(context.Background(), peek)
			if err != nil {
				return err.Error()
			}
			return ""
		})
		a, b := int64(500-r.Statuses[0].LimitRemaining), int64(60-r.Statuses[1].LimitRemaining)
		if a != b {
			t.Fatalf("node %s: a charged %d times, b %d: not one step", p.ID, a, b)
		}
		if b < admitted.Load() || b > admitted.Load()+unknown.Load() {
			t.Fatalf("node %s: b counts %d, with %d admitted and %d of unknown outcome", p.ID, b, admitted.Load(), unknown.Load())
		}
	}
}
