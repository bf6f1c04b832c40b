package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pbstruct "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/internal/testkit/proccluster"
)

// TestFreshClusterServesFromFirstReady: a cluster bootstrapped by this
// release serves every command from the first moment any node reports
// itself ready: a client that starts sending as soon as one readiness
// signal appears (PING answered, CLUSTER INFO's cluster_state:ok, /readyz;
// systemd's READY=1 asks what /readyz asks) gets no error for the string
// commands envoyproxy/ratelimit sends (INCRBY, EXPIRE), RL.*, and the rate
// limit service over gRPC and HTTP. Each shape of cluster is started
// afresh several times, the signal rotating: 20 times the cheapest (one
// node, one group), 3 times each other shape by default (once per signal)
// (SLUICE_BOOTSTRAP_RUNS=20 runs every shape 20 times, as issue #30 asks).
func TestFreshClusterServesFromFirstReady(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	others := 3
	if s := os.Getenv("SLUICE_BOOTSTRAP_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("SLUICE_BOOTSTRAP_RUNS=%q", s)
		}
		others = n
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(rlsClusterRules), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, shape := range []struct{ nodes, shards, runs int }{{1, 1, max(20, others)}, {1, 3, others}, {3, 1, others}, {3, 3, others}} {
		t.Run(fmt.Sprintf("nodes=%d/shards=%d", shape.nodes, shape.shards), func(t *testing.T) {
			for run := range shape.runs {
				signal := []string{"PING", "CLUSTER INFO", "/readyz"}[run%3]
				freshClusterRun(t, dir, shape.nodes, shape.shards, signal)
			}
		})
	}
}

// freshNode is one node's addresses for freshClusterRun.
type freshNode struct {
	p                   *proc
	grpc, http, metrics string
}

// freshClusterRun starts a new cluster, waits for the first node to show
// signal, and sends it every kind of command at once.
func freshClusterRun(t *testing.T, rules string, nodes, shards int, signal string) {
	t.Helper()
	var fresh []*freshNode
	c := layoutTestCluster(t, proccluster.Config{Nodes: nodes, Shards: shards, DataDir: t.TempDir(), Setup: func(ps []*proc) {
		for _, p := range ps {
			f := &freshNode{p: p, grpc: freeAddr(t), http: freeAddr(t), metrics: freeAddr(t)}
			fresh = append(fresh, f)
			p.Extra = append(p.Extra, "--rls-config", rules, "--rls-addr", f.grpc, "--rls-http-addr", f.http, "--metrics-addr", f.metrics)
		}
	}})
	defer c.Close()
	c.startAll()
	var first *freshNode
	err := testkit.Poll(30*time.Second, 2*time.Millisecond, func() error {
		for _, f := range fresh {
			if showsReady(f, signal) {
				first = f
				return nil
			}
		}
		return fmt.Errorf("no node shows %s", signal)
	})
	if err != nil {
		c.dumpLogs()
		t.Fatal(err)
	}
	if err := sendEveryKind(first); err != nil {
		c.dumpLogs()
		t.Fatalf("%d nodes, %d shards: %s ready on %s, then: %v", nodes, shards, signal, first.p.ID, err)
	}
}

// showsReady reports whether f's node shows the readiness signal now.
func showsReady(f *freshNode, signal string) bool {
	if signal == "/readyz" {
		res, err := http.Get("http://" + f.metrics + "/readyz")
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}
	conn, err := respwire.Dial(f.p.RESP, 100*time.Millisecond)
	if err != nil {
		return false
	}
	defer conn.Close()
	v, err := conn.Do(time.Second, strings.Fields(signal)...)
	if err != nil {
		return false
	}
	if signal == "PING" {
		return v.Kind == respwire.SimpleString && v.Str == "PONG"
	}
	return strings.Contains(v.Str, "cluster_state:ok")
}

// sendEveryKind sends f's node the string commands, an RL.* command and a
// rate limit service call over gRPC and HTTP: nil if none failed.
func sendEveryKind(f *freshNode) error {
	conn, err := respwire.Dial(f.p.RESP, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, cmd := range [][]string{{"INCRBY", "edge_remote_address_1", "1"}, {"EXPIRE", "edge_remote_address_1", "60"}, {"RL.TOKEN", "probe", "100", "100/s"}} {
		v, err := conn.Do(5*time.Second, cmd...)
		if err != nil {
			return fmt.Errorf("%s: %w", cmd[0], err)
		}
		if v.Kind == respwire.SimpleError || v.Kind == respwire.BulkError {
			return fmt.Errorf("%s: -%s", cmd[0], v.Str)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, closeCl, err := dialRLS(f.grpc)
	if err != nil {
		return err
	}
	defer closeCl()
	req := &pb.RateLimitRequest{Domain: "edge", Descriptors: []*pbstruct.RateLimitDescriptor{{Entries: rlsEntries("remote_address", "10.0.0.1")}}}
	if _, err := cl.ShouldRateLimit(ctx, req); err != nil {
		return fmt.Errorf("gRPC ShouldRateLimit: %w", err)
	}
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.2"}]}]}`
	res, err := http.Post("http://"+f.http+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		return fmt.Errorf("HTTP /json: %w", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP /json: %d %s", res.StatusCode, b)
	}
	return nil
}

// dialRLS is a gRPC client of the rate limit service at addr.
func dialRLS(addr string) (pb.RateLimitServiceClient, func(), error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return pb.NewRateLimitServiceClient(conn), func() { conn.Close() }, nil
}
