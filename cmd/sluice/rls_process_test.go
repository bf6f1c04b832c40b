package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pbstruct "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
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
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(rlsClusterRules), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddrs := map[string]string{}
	c := newTestClusterWith(t, 3, func(nodes []*proc) {
		for _, p := range nodes {
			a := freeAddr(t)
			grpcAddrs[p.ID] = a
			p.Extra = append(p.Extra, "--shards", strconv.Itoa(shardCount), "--rls-config", dir, "--rls-addr", a)
		}
	})
	c.waitServing(c.nodes...)
	req := &pb.RateLimitRequest{Domain: "edge", Descriptors: []*pbstruct.RateLimitDescriptor{
		{Entries: rlsEntries("remote_address", "10.0.0.7")},
		{Entries: rlsEntries("tenant", "acme", "route", "/checkout")},
	}}
	var ok, over atomic.Int64
	var wg sync.WaitGroup
	for _, p := range c.nodes {
		cl := rlsClient(t, grpcAddrs[p.ID])
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					r, err := cl.ShouldRateLimit(ctx, req)
					cancel()
					if err != nil {
						t.Errorf("node %s: %v", p.ID, err)
						return
					}
					if r.OverallCode == pb.RateLimitResponse_OK {
						ok.Add(1)
					} else {
						over.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
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
}
