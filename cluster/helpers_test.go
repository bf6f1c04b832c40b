package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// waitFor is testkit.Eventually polling every 5 ms.
func waitFor(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	testkit.Eventually(t, timeout, 5*time.Millisecond, fn)
}

// testClock is the leaders' wall clock in tests: it moves only when told.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *testClock) now() int64              { return c.ns.Load() }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// testLogger discards, unless SLUICE_TEST_LOG is set.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("SLUICE_TEST_LOG") == "" {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fastRaft sets Raft timings suited to in-process tests.
func fastRaft(c *Config) {
	c.HeartbeatTimeout = 50 * time.Millisecond
	c.ElectionTimeout = 50 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	c.ClusterTimeout = 500 * time.Millisecond
}

// testCluster is n in-process nodes of one Raft group, each built as the
// binary builds it (NewHost, one group) over an in-memory network
// (peer.Inmem): no socket, and links a test can cut.
type testCluster struct {
	t       testing.TB
	clock   *testClock
	net     *peer.Inmem
	cfgs    []Config
	hosts   []*Host
	nodes   []*Node // hosts[i]'s one group
	engines []*engine.Engine
}

// newTestCluster starts n voters (in memory unless opt sets a DataDir) and
// waits until every node can serve.
func newTestCluster(t testing.TB, n int, opt func(i int, c *Config)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, clock: newTestClock(), net: peer.NewInmem()}
	peers := make(map[string]string)
	for i := 0; i < n; i++ {
		peers[fmt.Sprintf("n%d", i+1)] = fmt.Sprintf("127.0.0.1:%d", 7001+i)
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("n%d", i+1)
		c := Config{
			ID:          id,
			RaftAddr:    peers[id],
			RESPAddr:    fmt.Sprintf("127.0.0.1:%d", 6001+i),
			ForwardAddr: "127.0.0.1:0",
			InMemory:    true,
			Network:     tc.net.Node(id),
			Logger:      testLogger(t).With("test_node", i+1),
			Now:         tc.clock.now,
		}
		if n > 1 {
			c.Peers = peers
		}
		fastRaft(&c)
		if opt != nil {
			opt(i, &c)
		}
		tc.cfgs = append(tc.cfgs, c)
		tc.hosts = append(tc.hosts, nil)
		tc.engines = append(tc.engines, nil)
		tc.nodes = append(tc.nodes, nil)
		tc.start(i)
	}
	t.Cleanup(tc.close)
	tc.waitReady()
	return tc
}

// start (re)starts node i with a fresh engine; a restarted node's links
// are healed.
func (tc *testCluster) start(i int) {
	tc.t.Helper()
	if tc.nodes[i] != nil {
		tc.heal(i)
	}
	eng := engine.New(engine.Config{Stripes: 16, Scripts: newTestRunner()}) // scripts_test.go
	h, err := NewHost(context.Background(), tc.cfgs[i], []*engine.Engine{eng})
	if err != nil {
		tc.t.Fatalf("node %d: %v", i+1, err)
	}
	tc.hosts[i], tc.nodes[i], tc.engines[i] = h, h.nodes[0], eng
}

// stop closes node i.
func (tc *testCluster) stop(i int) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tc.hosts[i].Close(ctx); err != nil {
		tc.t.Errorf("close node %d: %v", i+1, err)
	}
}

func (tc *testCluster) close() {
	for i, h := range tc.hosts {
		if h != nil && tc.nodes[i] != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := h.Close(ctx); err != nil {
				tc.t.Errorf("close node %d: %v", i+1, err)
			}
			cancel()
		}
	}
}

func (tc *testCluster) waitReady() {
	tc.t.Helper()
	for i, n := range tc.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := n.WaitReady(ctx)
		cancel()
		if err != nil {
			tc.t.Fatalf("node %d: %v", i+1, err)
		}
	}
}

// leader returns the index of the node that leads and is ready.
func (tc *testCluster) leader() int {
	tc.t.Helper()
	idx := -1
	waitFor(tc.t, 10*time.Second, func() error {
		for i, n := range tc.nodes {
			if k, _ := n.route(); k == routeLocal {
				idx = i
				return nil
			}
		}
		return fmt.Errorf("no ready leader")
	})
	return idx
}

// isolate cuts node i's Raft links to and from every other node (its
// forwarding links stay up).
func (tc *testCluster) isolate(i int) {
	for j := range tc.cfgs {
		if j != i {
			tc.cut(i, j)
		}
	}
}

// cut cuts the Raft links between nodes i and j, both ways.
func (tc *testCluster) cut(i, j int) {
	tc.net.Cut(tc.cfgs[i].ID, tc.cfgs[j].RaftAddr)
	tc.net.Cut(tc.cfgs[j].ID, tc.cfgs[i].RaftAddr)
}

// heal reconnects node i's Raft links.
func (tc *testCluster) heal(i int) {
	for j := range tc.cfgs {
		if j != i {
			tc.net.Heal(tc.cfgs[i].ID, tc.cfgs[j].RaftAddr)
			tc.net.Heal(tc.cfgs[j].ID, tc.cfgs[i].RaftAddr)
		}
	}
}

// waitConverged waits until every running node has applied what node
// ref has applied, then checks their states are identical.
func (tc *testCluster) waitConverged(ref int) {
	tc.t.Helper()
	want := tc.nodes[ref].fsm.applied.Load()
	waitFor(tc.t, 10*time.Second, func() error {
		for i, n := range tc.nodes {
			if got := n.fsm.applied.Load(); got < want {
				return fmt.Errorf("node %d applied %d < %d", i+1, got, want)
			}
		}
		return nil
	})
	ref0 := dump(tc.engines[ref])
	for i := range tc.nodes {
		if got := dump(tc.engines[i]); got != ref0 {
			tc.t.Fatalf("node %d's state differs from node %d's:\n%s\nvs\n%s", i+1, ref+1, clip(got), clip(ref0))
		}
	}
}

// dump renders an engine's whole state canonically: the clock, then every
// live record sorted by key.
func dump(e *engine.Engine) string {
	cs := e.ClockState()
	var recs []engine.Record
	for i := 0; i < e.NumStripes(); i++ {
		recs = append(recs, e.ExportStripe(i, cs.Last)...)
	}
	sort.Slice(recs, func(i, j int) bool { return bytes.Compare(recs[i].Key, recs[j].Key) < 0 })
	var b bytes.Buffer
	fmt.Fprintf(&b, "clock %+v\n", cs)
	for _, r := range recs {
		fmt.Fprintf(&b, "%q %+v %d %d %d %v %v\n", r.Key, r.Rule, r.A, r.B, r.C, r.Log, r.Leases)
	}
	return b.String()
}

func clip(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "..."
	}
	return s
}

// Rules and ops for tests.
var (
	tokenRule = engine.Rule{Kind: engine.KindToken, Limit: 5, Period: int64(time.Hour)}
)

func decide(key string, rule engine.Rule, cost int64) engine.Op {
	return engine.Op{Code: engine.OpDecide, Key: []byte(key), Rule: rule, Cost: cost}
}

// exec runs ops on node n and fails the test on error.
func exec(t testing.TB, n *Node, ops ...engine.Op) []engine.Result {
	t.Helper()
	res := make([]engine.Result, len(ops))
	if err := n.Execute(context.Background(), ops, res); err != nil {
		t.Fatalf("node %s: Execute: %v", n.cfg.ID, err)
	}
	return res
}

// allowed renders results' Allowed flags as a string of 1s and 0s.
func allowed(rs []engine.Result) string {
	b := make([]byte, len(rs))
	for i, r := range rs {
		b[i] = '0'
		if r.Allowed {
			b[i] = '1'
		}
		if r.Err != nil {
			b[i] = 'E'
		}
	}
	return string(b)
}

// diskSetup is a log store and a durability mode for the tests that touch
// disk.
type diskSetup struct {
	store, fsync string
}

func (d diskSetup) name() string { return d.store + "/" + d.fsync }

// apply makes c a durable node in dir with d's store and mode.
func (d diskSetup) apply(c *Config, dir string) {
	c.InMemory = false
	c.DataDir = dir
	c.LogStore = d.store
	c.Fsync = d.fsync
}

var (
	// storeSetups: each log store, syncing every append.
	storeSetups = []diskSetup{{LogStoreBolt, FsyncAlways}, {LogStoreWAL, FsyncAlways}}
	// diskSetups: each log store in each durability mode.
	diskSetups = []diskSetup{
		{LogStoreBolt, FsyncAlways}, {LogStoreBolt, FsyncEverysec}, {LogStoreBolt, FsyncNo},
		{LogStoreWAL, FsyncAlways}, {LogStoreWAL, FsyncEverysec}, {LogStoreWAL, FsyncNo},
	}
)
