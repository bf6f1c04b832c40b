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
	"github.com/sluice-rl/sluice/internal/testkit/memnet"
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

// testHosts is n in-process nodes of shards Raft groups each, every one
// built as the binary builds it (NewHost), over an in-memory network
// (memnet.Inmem: no socket, and links a test can cut) or, where a test needs
// real sockets (TLS), over TCP on loopback. Node i is "n<i+1>".
type testHosts struct {
	t       testing.TB
	clock   *testClock
	net     *memnet.Inmem // nil over TCP
	cfgs    []Config
	hosts   []*Host // nil once stopped
	engines [][]*engine.Engine
	shards  int
	// strict: a host that fails to close fails the test.
	strict bool
	ports  int // freeAddr's last port, on the in-memory network
}

// hostsOpt says how startHosts builds its hosts.
type hostsOpt struct {
	shards int  // Raft groups per host (0: 1)
	tcp    bool // real TCP on loopback instead of the in-memory network
	// config edits node i's configuration (in memory unless it sets a
	// DataDir; Raft's timing is fastRaft's unless it sets another).
	config func(i int, c *Config)
}

// startHosts starts n hosts, a cluster of every one of them, and waits
// until every group of every host can serve.
func startHosts(t testing.TB, n int, o hostsOpt) *testHosts {
	t.Helper()
	th := &testHosts{t: t, clock: newTestClock(), shards: max(o.shards, 1)}
	if !o.tcp {
		th.net = memnet.NewInmem()
	}
	peers := make(map[string]string)
	fwd := make([]string, n)
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		peers[id], fwd[i] = th.freeAddr(), "127.0.0.1:0"
		if o.tcp {
			fwd[i] = th.freeAddr()
		}
	}
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		c := Config{
			ID:          id,
			RaftAddr:    peers[id],
			RESPAddr:    fmt.Sprintf("127.0.0.1:%d", 6001+i),
			ForwardAddr: fwd[i],
			InMemory:    true,
			Network:     th.network(id),
			Logger:      testLogger(t).With("test_node", i+1),
			Now:         th.clock.now,
		}
		if n > 1 {
			c.Peers = peers
		}
		fastRaft(&c)
		if o.config != nil {
			o.config(i, &c)
		}
		th.cfgs = append(th.cfgs, c)
		th.hosts = append(th.hosts, nil)
		th.engines = append(th.engines, nil)
	}
	for i := range n {
		th.start(i)
	}
	t.Cleanup(th.close)
	for i, h := range th.hosts {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := h.WaitReady(ctx)
		cancel()
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	return th
}

// freeAddr is an address no host listens on: the next of 127.0.0.1:7001,
// 7002, ... on the in-memory network, a free loopback port over TCP.
func (th *testHosts) freeAddr() string {
	if th.net == nil {
		addr, ln := reserveAddr(th.t)
		ln.Close()
		return addr
	}
	th.ports++
	return fmt.Sprintf("127.0.0.1:%d", 7000+th.ports)
}

// network is node id's Network: nil (TCP) or its view of the in-memory
// network.
func (th *testHosts) network(id string) peer.Network {
	if th.net == nil {
		return nil
	}
	return th.net.Node(id)
}

// start (re)starts host i with fresh engines; over the in-memory network,
// its cut links are healed first.
func (th *testHosts) start(i int) {
	th.t.Helper()
	if th.net != nil {
		th.heal(i)
	}
	engines := make([]*engine.Engine, th.shards)
	for g := range engines {
		engines[g] = engine.New(engine.Config{Stripes: 16, Scripts: newTestRunner()}) // scripts_test.go
	}
	h, err := NewHost(context.Background(), th.cfgs[i], engines)
	if err != nil {
		th.t.Fatalf("host %d: %v", i+1, err)
	}
	th.hosts[i], th.engines[i] = h, engines
}

// stop closes host i.
func (th *testHosts) stop(i int) {
	th.t.Helper()
	h := th.hosts[i]
	if h == nil {
		return
	}
	th.hosts[i] = nil
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil && th.strict {
		th.t.Errorf("close node %d: %v", i+1, err)
	}
}

func (th *testHosts) close() {
	for i := range th.hosts {
		th.stop(i)
	}
}

// cut cuts the Raft links between nodes i and j, both ways (the in-memory
// network only); their forwarding links stay up.
func (th *testHosts) cut(i, j int) {
	th.net.Cut(th.cfgs[i].ID, th.cfgs[j].RaftAddr)
	th.net.Cut(th.cfgs[j].ID, th.cfgs[i].RaftAddr)
}

// isolate cuts node i's Raft links to and from every other node.
func (th *testHosts) isolate(i int) {
	for j := range th.cfgs {
		if j != i {
			th.cut(i, j)
		}
	}
}

// heal reconnects node i's Raft links.
func (th *testHosts) heal(i int) {
	for j := range th.cfgs {
		if j != i {
			th.net.Heal(th.cfgs[i].ID, th.cfgs[j].RaftAddr)
			th.net.Heal(th.cfgs[j].ID, th.cfgs[i].RaftAddr)
		}
	}
}

// testCluster is testHosts of one Raft group each, seen as their nodes.
type testCluster struct {
	*testHosts
	nodes   []*Node          // host i's one group (kept once stopped)
	engines []*engine.Engine // its engine
}

// newTestCluster starts n voters of one group (in memory unless opt sets a
// DataDir) and waits until every node can serve.
func newTestCluster(t testing.TB, n int, opt func(i int, c *Config)) *testCluster {
	t.Helper()
	th := startHosts(t, n, hostsOpt{config: opt})
	th.strict = true
	tc := &testCluster{testHosts: th, nodes: make([]*Node, n), engines: make([]*engine.Engine, n)}
	for i := range n {
		tc.nodes[i], tc.engines[i] = th.hosts[i].nodes[0], th.engines[i][0]
	}
	return tc
}

// start (re)starts node i with a fresh engine.
func (tc *testCluster) start(i int) {
	tc.t.Helper()
	tc.testHosts.start(i)
	tc.nodes[i], tc.engines[i] = tc.hosts[i].nodes[0], tc.testHosts.engines[i][0]
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
			if k := n.route().kind; k == routeLocal {
				idx = i
				return nil
			}
		}
		return fmt.Errorf("no ready leader")
	})
	return idx
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
