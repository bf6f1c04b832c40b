package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
)

func TestSingleNode(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	n := tc.nodes[0]
	// One pipeline: five admitted, the sixth denied, all at one instant.
	ops := make([]engine.Op, 6)
	for i := range ops {
		ops[i] = decide("k", tokenRule, 1)
	}
	if got := allowed(exec(t, n, ops...)); got != "111110" {
		t.Fatalf("pipeline = %s, want 111110", got)
	}
	res := exec(t, n, engine.Op{Code: engine.OpType, Key: []byte("k")}, engine.Op{Code: engine.OpCount})
	if res[0].Kind != engine.KindToken || res[1].Count != 1 {
		t.Fatalf("TYPE, DBSIZE = %v, %d", res[0].Kind, res[1].Count)
	}
	// WRONGTYPE is a per-op error, not a batch error.
	res = exec(t, n, decide("k", engine.Rule{Kind: engine.KindFixed, Limit: 1, Period: 1e9}, 1))
	if !errors.Is(res[0].Err, engine.ErrWrongType) {
		t.Fatalf("WRONGTYPE: got %v", res[0].Err)
	}
	st := n.Status()
	want := []string{"id", "role", "leader_id", "leader_addr", "term", "commit_index", "applied_index", "members", "voters", "nonvoters",
		"cluster_version", "cluster_version_supported", "apply_error", "removed"}
	if len(st) != len(want) {
		t.Fatalf("status = %v, want the fields %v", st, want)
	}
	for i, kv := range st {
		if kv[0] != want[i] {
			t.Fatalf("status field %d = %q, want %q", i, kv[0], want[i])
		}
	}
	if st[1][1] != "leader" || st[2][1] != "n1" || st[3][1] != "127.0.0.1:6001" || st[7][1] != "n1=127.0.0.1:7001" || st[8][1] != "n1" || st[9][1] != "" {
		t.Fatalf("status = %v", st)
	}
	if err := n.Execute(context.Background(), ops, make([]engine.Result, 1)); err == nil {
		t.Fatal("mismatched results length accepted")
	}
}

// TestThreeNodesIdenticalState runs concurrent random traffic through all
// three nodes; every replica must end with the same state, bit for bit.
func TestThreeNodesIdenticalState(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	rules := []engine.Rule{
		{Kind: engine.KindToken, Limit: 10, Period: int64(time.Second)},
		{Kind: engine.KindLeaky, Limit: 7, Period: int64(300 * time.Millisecond)},
		{Kind: engine.KindFixed, Limit: 5, Period: int64(time.Minute)},
		{Kind: engine.KindSliding, Limit: 5, Period: int64(10 * time.Second)},
		{Kind: engine.KindLog, Limit: 4, Period: int64(5 * time.Second)},
		{Kind: engine.KindGCRA, Limit: 3, Period: int64(time.Second)},
	}
	var wg sync.WaitGroup
	for w := 0; w < 9; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			n := tc.nodes[w%3]
			for i := 0; i < 40; i++ {
				ops := make([]engine.Op, 1+rng.Intn(4))
				for j := range ops {
					k := rng.Intn(len(rules))
					key := fmt.Sprintf("%s:%d", rules[k].Kind, rng.Intn(6))
					ops[j] = decide(key, rules[k], int64(rng.Intn(3)))
					if rng.Intn(20) == 0 {
						ops[j] = engine.Op{Code: engine.OpDelete, Key: []byte(key)}
					}
				}
				if err := n.Execute(context.Background(), ops, make([]engine.Result, len(ops))); err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				if rng.Intn(4) == 0 {
					tc.clock.advance(time.Duration(rng.Intn(500)) * time.Millisecond)
				}
			}
		}(w)
	}
	wg.Wait()
	if tc.engines[0].Len() == 0 {
		t.Fatal("no state at all")
	}
	tc.waitConverged(tc.leader())
}

// TestMinorityNeverDecides: an isolated node, leader or follower, answers
// every command with an error within the cluster timeout; the majority
// carries on, and the isolated node catches up when healed.
func TestMinorityNeverDecides(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	old := tc.leader()
	tc.isolate(old)
	timeout := tc.cfgs[old].ClusterTimeout

	// The isolated old leader: whatever it believes, it must not decide.
	for i := 0; i < 3; i++ {
		start := time.Now()
		res := make([]engine.Result, 1)
		err := tc.nodes[old].Execute(context.Background(), []engine.Op{decide("m", tokenRule, 1)}, res)
		if elapsed := time.Since(start); elapsed > timeout+300*time.Millisecond {
			t.Fatalf("isolated leader answered after %v", elapsed)
		}
		if err == nil {
			t.Fatalf("isolated leader decided: %+v", res[0])
		}
		if !errors.Is(err, ErrClusterDown) && !errors.Is(err, ErrUncertain) {
			t.Fatalf("isolated leader: %v", err)
		}
	}
	// Once it knows it is alone: CLUSTERDOWN, with the timeout in the text.
	waitFor(t, 5*time.Second, func() error {
		if _, id := tc.nodes[old].raft.LeaderWithID(); id != "" {
			return fmt.Errorf("still believes in leader %q", id)
		}
		return nil
	})
	err := tc.nodes[old].Execute(context.Background(), []engine.Op{decide("m", tokenRule, 1)}, make([]engine.Result, 1))
	if !errors.Is(err, ErrClusterDown) || errcode.Of(err).Num != int64(timeout) {
		t.Fatalf("alone: %v", err)
	}

	// The majority elects a leader and decides.
	var rest []int
	for i := range tc.nodes {
		if i != old {
			rest = append(rest, i)
		}
	}
	waitFor(t, 5*time.Second, func() error {
		_, err := tc.nodes[rest[0]].raft.LeaderWithID()
		_ = err
		if k := tc.nodes[rest[0]].route().kind; k != routeLocal && k != routeForward {
			return fmt.Errorf("majority not ready")
		}
		return nil
	})
	if got := allowed(exec(t, tc.nodes[rest[1]], decide("m", tokenRule, 5), decide("m", tokenRule, 1))); got != "10" {
		t.Fatalf("majority: %s, want 10", got)
	}

	// Healed, the old leader follows and converges.
	tc.heal(old)
	waitFor(t, 5*time.Second, func() error {
		if k := tc.nodes[old].route().kind; k != routeForward {
			return fmt.Errorf("healed node cannot forward yet")
		}
		return nil
	})
	if got := allowed(exec(t, tc.nodes[old], decide("m", tokenRule, 1))); got != "0" {
		t.Fatalf("healed node: %s, want 0", got)
	}
	tc.waitConverged(tc.leader())
}

// TestLeadershipChangeKeepsDecisions: every admission acknowledged by one
// leader is known to the next.
func TestLeadershipChangeKeepsDecisions(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	for round := 0; round < 3; round++ {
		l := tc.leader()
		key := fmt.Sprintf("k%d", round)
		for i := 0; i < 5; i++ {
			if got := allowed(exec(t, tc.nodes[l], decide(key, tokenRule, 1))); got != "1" {
				t.Fatalf("round %d: admission %d denied", round, i)
			}
		}
		// Also warp the replicated clock: it must survive the change too.
		exec(t, tc.nodes[l], engine.Op{Code: engine.OpTimeWarp, Clock: int64(time.Second)})
		before := exec(t, tc.nodes[l], engine.Op{Code: engine.OpTime})[0].Time
		if err := tc.nodes[l].Transfer(context.Background(), ""); err != nil {
			t.Fatalf("round %d: transfer: %v", round, err)
		}
		nl := tc.leader()
		if nl == l {
			t.Fatalf("round %d: leadership did not move", round)
		}
		// Through the new leader, and forwarded through the old one.
		for _, via := range []int{nl, l} {
			if got := allowed(exec(t, tc.nodes[via], decide(key, tokenRule, 1))); got != "0" {
				t.Fatalf("round %d: via node %d: the sixth admission was allowed", round, via+1)
			}
		}
		if after := exec(t, tc.nodes[nl], engine.Op{Code: engine.OpTime})[0].Time; after < before {
			t.Fatalf("round %d: time went back from %d to %d", round, before, after)
		}
	}
	tc.waitConverged(tc.leader())
}

// TestForwarding: a follower's answers are the leader's, in order, for
// pipelines and for many concurrent callers.
func TestForwarding(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.leader()
	f := (l + 1) % 3
	ops := make([]engine.Op, 8)
	for i := range ops {
		ops[i] = decide("fw", tokenRule, 1)
	}
	ops[6] = engine.Op{Code: engine.OpPeek, Key: []byte("fw")}
	res := exec(t, tc.nodes[f], ops...)
	if got := allowed(res[:6]); got != "111110" {
		t.Fatalf("forwarded pipeline: %s", got)
	}
	if res[6].Kind != engine.KindToken || res[6].Remaining != 0 || res[6].Limit != 5 {
		t.Fatalf("forwarded peek: %+v", res[6])
	}
	res = exec(t, tc.nodes[f], decide("fw", engine.Rule{Kind: engine.KindLog, Limit: 1, Period: 1e9}, 1),
		decide("fw", engine.Rule{Kind: engine.KindToken, Limit: 0, Period: 1}, 1))
	if !errors.Is(res[0].Err, engine.ErrWrongType) || !errors.Is(res[1].Err, engine.ErrBadRule) {
		t.Fatalf("forwarded errors: %v, %v", res[0].Err, res[1].Err)
	}

	// Concurrent callers on both followers, each with its own key: every
	// caller sees exactly its limit admitted, in order.
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			n := tc.nodes[(l+1+w%2)%3]
			key := fmt.Sprintf("c%d", w)
			var got strings.Builder
			for i := 0; i < 8; i++ {
				res := make([]engine.Result, 1)
				if err := n.Execute(context.Background(), []engine.Op{decide(key, tokenRule, 1)}, res); err != nil {
					t.Errorf("caller %d: %v", w, err)
					return
				}
				got.WriteString(allowed(res))
			}
			if got.String() != "11111000" {
				t.Errorf("caller %d: %s, want 11111000", w, got.String())
			}
		}(w)
	}
	wg.Wait()
	tc.waitConverged(l)
}

// TestSnapshotRestore: decisions survive a restart, both those in the
// snapshot and those only in the log after it; so does the clock. For
// every log store and durability mode.
func TestSnapshotRestore(t *testing.T) {
	for _, ds := range diskSetups {
		t.Run(ds.name(), func(t *testing.T) { testSnapshotRestore(t, ds) })
	}
}

func testSnapshotRestore(t *testing.T, ds diskSetup) {
	dir := t.TempDir()
	tc := newTestCluster(t, 1, func(_ int, c *Config) {
		ds.apply(c, dir)
	})
	n := tc.nodes[0]
	for i := 0; i < 20; i++ {
		exec(t, n, decide(fmt.Sprintf("a%d", i), tokenRule, 3))
	}
	exec(t, n, engine.Op{Code: engine.OpTimeWarp, Clock: int64(time.Hour)})
	if err := n.Snapshot(context.Background()); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	exec(t, n, decide("a0", tokenRule, 1), decide("b", tokenRule, 5))
	before := dump(tc.engines[0])

	tc.stop(0)
	tc.start(0)
	tc.waitReady()
	if after := dump(tc.engines[0]); after != before {
		t.Fatalf("state after restart:\n%s\nwant\n%s", clip(after), clip(before))
	}
	res := exec(t, tc.nodes[0], decide("a0", tokenRule, 2), decide("a0", tokenRule, 1), decide("b", tokenRule, 1))
	if got := allowed(res); got != "100" {
		t.Fatalf("after restart: %s, want 100", got)
	}
}

// TestLaggingFollowerGetsSnapshot: a follower that missed more than the
// trailing log is sent a snapshot, and ends with the same state.
func TestLaggingFollowerGetsSnapshot(t *testing.T) {
	tc := newTestCluster(t, 3, func(_ int, c *Config) { c.SnapshotThreshold = 16 })
	l := tc.leader()
	f := (l + 1) % 3
	tc.isolate(f)
	for i := 0; i < 60; i++ {
		exec(t, tc.nodes[l], decide(fmt.Sprintf("s%d", i%7), engine.Rule{Kind: engine.KindLog, Limit: 50, Period: int64(time.Hour)}, 1))
		tc.clock.advance(time.Millisecond)
	}
	if err := tc.nodes[l].Snapshot(context.Background()); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	tc.heal(f)
	tc.waitConverged(l)
}

// TestLoading: a node replaying its log, with no leader to forward to,
// holds commands and answers LOADING after ClusterTimeout, with either log
// store.
func TestLoading(t *testing.T) {
	for _, ds := range storeSetups {
		t.Run(ds.name(), func(t *testing.T) { testLoading(t, ds) })
	}
}

func testLoading(t *testing.T, ds diskSetup) {
	dir := t.TempDir()
	gate := make(chan struct{})
	var gated atomic.Bool
	tc := newTestCluster(t, 1, func(_ int, c *Config) {
		ds.apply(c, dir)
		c.applyHook = func() {
			if gated.Load() {
				<-gate
			}
		}
	})
	for i := 0; i < 10; i++ {
		exec(t, tc.nodes[0], decide("l", tokenRule, 1))
	}
	tc.stop(0)
	gated.Store(true)
	tc.start(0)
	waitFor(t, 5*time.Second, func() error {
		err := tc.nodes[0].Execute(context.Background(), []engine.Op{decide("l", tokenRule, 1)}, make([]engine.Result, 1))
		if err != ErrLoading {
			return fmt.Errorf("got %v, want LOADING", err)
		}
		return nil
	})
	gated.Store(false)
	close(gate)
	tc.waitReady()
	if got := allowed(exec(t, tc.nodes[0], decide("l", tokenRule, 1))); got != "0" {
		t.Fatalf("after replay: %s, want 0", got)
	}
}

// TestCloseFailsWaiting: closing a node answers the commands waiting on it.
func TestCloseFailsWaiting(t *testing.T) {
	tc := newTestCluster(t, 3, func(_ int, c *Config) { c.ClusterTimeout = 5 * time.Second })
	l := tc.leader()
	tc.isolate(l)
	errc := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			errc <- tc.nodes[l].Execute(context.Background(), []engine.Op{decide("x", tokenRule, 1)}, make([]engine.Result, 1))
		}()
	}
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	tc.stop(l)
	for i := 0; i < 4; i++ {
		if err := <-errc; err == nil {
			t.Fatal("a command succeeded without quorum")
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("close took %v", d)
	}
	tc.nodes[l] = nil
}

// TestAdmin covers JOIN and REMOVE, sent to a follower (which forwards
// them to the leader), and their refusals.
func TestAdmin(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.leader()
	f := (l + 1) % 3
	o := (l + 2) % 3 // the other follower, which takes the commands
	ctx := context.Background()
	if err := tc.hosts[o].Join(ctx, "a b", "x"); !errcode.Is(err, errcode.BadNodeID) {
		t.Fatalf("join with a bad id: %v", err)
	}
	err := tc.hosts[o].Join(ctx, "n9", tc.cfgs[l].RaftAddr)
	if e := errcode.Of(err); e == nil || e.Code != errcode.MemberConflict || e.Detail != tc.cfgs[l].ID+"="+tc.cfgs[l].RaftAddr {
		t.Fatalf("join at a member's address: %v", err)
	}
	if err := tc.hosts[o].Join(ctx, tc.cfgs[l].ID, "127.0.0.1:7999"); !errcode.Is(err, errcode.MemberConflict) {
		t.Fatalf("join of a member's id at another address: %v", err)
	}
	if err := tc.hosts[o].Join(ctx, tc.cfgs[l].ID, tc.cfgs[l].RaftAddr); err != nil {
		t.Fatalf("join of a voter at its own address (nothing to do): %v", err)
	}
	if err := tc.hosts[o].Remove(ctx, "nope"); !errcode.Is(err, errcode.NoSuchNode) {
		t.Fatalf("remove unknown: %v", err)
	}
	if err := tc.hosts[o].Remove(ctx, tc.cfgs[f].ID); err != nil {
		t.Fatalf("remove: %v", err)
	}
	waitFor(t, 5*time.Second, func() error {
		st := tc.nodes[l].Status()
		if strings.Contains(st[7][1], tc.cfgs[f].ID+"=") {
			return fmt.Errorf("members still %s", st[7][1])
		}
		return nil
	})
	if got := allowed(exec(t, tc.nodes[l], decide("after-remove", tokenRule, 1))); got != "1" {
		t.Fatalf("after remove: %s", got)
	}
	// The removed node shut its Raft down; it comes back empty, without
	// bootstrapping, and is joined.
	tc.stop(f)
	tc.cfgs[f].Peers, tc.cfgs[f].NoBootstrap = nil, true
	tc.start(f)
	if err := tc.hosts[o].Join(context.Background(), tc.cfgs[f].ID, tc.cfgs[f].RaftAddr); err != nil {
		t.Fatalf("join: %v", err)
	}
	st := statusMap(tc.nodes[l].Status())
	if want := strings.Join(slices.Sorted(slices.Values([]string{tc.cfgs[0].ID, tc.cfgs[1].ID, tc.cfgs[2].ID})), ","); st["voters"] != want || st["nonvoters"] != "" {
		t.Fatalf("after the join: voters %q nonvoters %q, want voters %q", st["voters"], st["nonvoters"], want)
	}
	if err := tc.nodes[f].Snapshot(context.Background()); err != nil {
		t.Fatalf("follower snapshot: %v", err)
	}
	waitFor(t, 5*time.Second, func() error {
		if k := tc.nodes[f].route().kind; k != routeForward {
			return fmt.Errorf("rejoined node not forwarding")
		}
		return nil
	})
	if got := allowed(exec(t, tc.nodes[f], decide("after-remove", tokenRule, 5))); got != "0" {
		t.Fatalf("rejoined node: %s", got)
	}
}

// TestFailoverUnderLoad: clients on every node admit against one limit
// while the leader is cut off. No more than the limit is ever admitted,
// and every acknowledged admission is in the new leader's state.
func TestFailoverUnderLoad(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	const limit = 150
	rule := engine.Rule{Kind: engine.KindToken, Limit: limit, Period: int64(time.Hour)}
	old := tc.leader()
	var acked, unknown, denied, down atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 12; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			n := tc.nodes[w%3]
			for {
				select {
				case <-stop:
					return
				default:
				}
				res := make([]engine.Result, 1)
				err := n.Execute(context.Background(), []engine.Op{decide("hot", rule, 1)}, res)
				switch {
				case err == nil && res[0].Allowed:
					acked.Add(1)
				case err == nil:
					denied.Add(1)
				case errors.Is(err, ErrUncertain):
					unknown.Add(1)
				case errors.Is(err, ErrClusterDown):
					down.Add(1)
				default:
					t.Errorf("unexpected error: %v", err)
					return
				}
			}
		}(w)
	}
	waitFor(t, 10*time.Second, func() error {
		if acked.Load() < limit/3 {
			return fmt.Errorf("%d admitted so far", acked.Load())
		}
		return nil
	})
	tc.isolate(old)
	waitFor(t, 10*time.Second, func() error {
		if denied.Load() < 50 {
			return fmt.Errorf("%d denied so far", denied.Load())
		}
		return nil
	})
	close(stop)
	wg.Wait()

	// The isolated leader steps down once its lease runs out without
	// heartbeats (a loaded machine can take it past the 50 denials).
	waitFor(t, 10*time.Second, func() error {
		if k := tc.nodes[old].route().kind; k == routeLocal {
			return fmt.Errorf("the isolated node still leads")
		}
		return nil
	})
	nl := tc.leader()
	if nl == old {
		t.Fatal("the isolated node still leads")
	}
	peek := exec(t, tc.nodes[nl], engine.Op{Code: engine.OpPeek, Key: []byte("hot")})[0]
	consumed := limit - peek.Remaining
	t.Logf("acked %d, unknown %d, denied %d, clusterdown %d; consumed %d", acked.Load(), unknown.Load(), denied.Load(), down.Load(), consumed)
	if acked.Load() > limit {
		t.Fatalf("admitted %d over a limit of %d", acked.Load(), limit)
	}
	// CLUSTERDOWN means not applied: only UNCERTAIN replies may have
	// consumed units beyond the acknowledged ones.
	if consumed < acked.Load() || consumed > acked.Load()+unknown.Load() {
		t.Fatalf("state consumed %d; acknowledged %d, unknown %d, clusterdown %d", consumed, acked.Load(), unknown.Load(), down.Load())
	}
	tc.heal(old)
	tc.waitConverged(nl)
}

// TestRestartAll: every node of a durable cluster stops and comes back
// with its state, with either log store (and everysec's flusher: a clean
// shutdown keeps everything).
func TestRestartAll(t *testing.T) {
	for _, ds := range append(storeSetups, diskSetup{LogStoreWAL, FsyncEverysec}) {
		t.Run(ds.name(), func(t *testing.T) { testRestartAll(t, ds) })
	}
}

func testRestartAll(t *testing.T, ds diskSetup) {
	tc := newTestCluster(t, 3, func(i int, c *Config) {
		ds.apply(c, t.TempDir())
	})
	l := tc.leader()
	for i := 0; i < 5; i++ {
		exec(t, tc.nodes[(l+i)%3], decide("kept", tokenRule, 1))
	}
	exec(t, tc.nodes[l], engine.Op{Code: engine.OpClockFreeze})
	frozen := tc.engines[l].ClockState()
	for i := range tc.nodes {
		tc.stop(i)
	}
	for i := range tc.nodes {
		tc.start(i)
	}
	tc.waitReady()
	for i := range tc.nodes {
		if got := allowed(exec(t, tc.nodes[i], decide("kept", tokenRule, 1))); got != "0" {
			t.Fatalf("node %d after restart: %s, want 0", i+1, got)
		}
	}
	if cs := tc.engines[tc.leader()].ClockState(); !cs.Frozen || cs.FrozenAt != frozen.FrozenAt {
		t.Fatalf("clock after restart %+v, want frozen at %d", cs, frozen.FrozenAt)
	}
	tc.waitConverged(tc.leader())
}

// TestRestartRecoveryCompacted, for each log store: with snapshots taken
// and the log compacted behind them, a follower that was down while the
// log moved past its trailing entries comes back (from a snapshot) with
// the leader's state, and then a restart of every node keeps it all.
func TestRestartRecoveryCompacted(t *testing.T) {
	for _, ds := range append(storeSetups, diskSetup{LogStoreWAL, FsyncEverysec}, diskSetup{LogStoreBolt, FsyncEverysec}) {
		t.Run(ds.name(), func(t *testing.T) { testRestartRecoveryCompacted(t, ds) })
	}
}

func testRestartRecoveryCompacted(t *testing.T, ds diskSetup) {
	tc := newTestCluster(t, 3, func(i int, c *Config) {
		ds.apply(c, t.TempDir())
		c.SnapshotThreshold = 16
		c.SnapshotInterval = 10 * time.Millisecond
		// Every decision below must be answered exactly once (the count
		// of c0 is checked), so give Raft timings that a busy machine's
		// fsyncs do not turn into elections.
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 150*time.Millisecond
		c.ClusterTimeout = 5 * time.Second
	})
	rule := engine.Rule{Kind: engine.KindLog, Limit: 1000, Period: int64(time.Hour)}
	write := func(from, n int) {
		for i := from; i < from+n; i++ {
			exec(t, tc.nodes[tc.leader()], decide(fmt.Sprintf("c%d", i%11), rule, 1))
			tc.clock.advance(time.Millisecond)
		}
	}
	compacted := func(i int) func() error {
		return func() error {
			first, err := tc.nodes[i].stores.Logs.FirstIndex()
			if err != nil || first <= 1 {
				return fmt.Errorf("node %d: first index %d (%v): not compacted yet", i+1, first, err)
			}
			return nil
		}
	}
	write(0, 100)
	for i := range tc.nodes {
		waitFor(t, 10*time.Second, compacted(i))
	}
	f := (tc.leader() + 1) % 3
	tc.stop(f)
	write(100, 80) // well past the 20 trailing entries
	l := tc.leader()
	waitFor(t, 10*time.Second, compacted(l))
	tc.start(f)
	tc.waitConverged(l)

	want := dump(tc.engines[l])
	for i := range tc.nodes {
		tc.stop(i)
	}
	for i := range tc.nodes {
		tc.start(i)
	}
	tc.waitReady()
	tc.waitConverged(tc.leader())
	if got := dump(tc.engines[tc.leader()]); got != want {
		t.Fatalf("after restarting every node:\n%s\nwant\n%s", clip(got), clip(want))
	}
	// 180 decisions over 11 keys: c0 took 17 of its 1000.
	res := exec(t, tc.nodes[tc.leader()], decide("c0", engine.Rule{Kind: engine.KindLog, Limit: 17, Period: int64(time.Hour)}, 1))
	if got := allowed(res); got != "0" {
		t.Fatalf("c0 after recovery: %s, want 0 (17 decisions kept)", got)
	}
}

// statusMap is RAFT.STATUS's fields as a map.
func statusMap(st [][2]string) map[string]string {
	m := map[string]string{}
	for _, kv := range st {
		m[kv[0]] = kv[1]
	}
	return m
}
