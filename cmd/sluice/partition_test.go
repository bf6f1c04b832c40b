package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/internal/testkit/proccluster"
)

// proxiedCluster is a cluster whose every node dials each peer's Raft and
// forward ports through a proxy of its own (internal/testkit's LinkProxy,
// proccluster's Config.Proxies), so that a node can be cut off. A cut
// link goes silent (bytes wait in the proxy, nothing is closed), which is
// what a dead network looks like to both ends. On heal, a link either
// resumes every connection intact (as TCP does when its next
// retransmission comes soon), or, for the forward links with stuckFwd,
// keeps the connections that lived through the cut silent for good (as
// TCP does for tens of seconds when a long cut pushed it deep into its
// retransmission backoff) while new connections pass.
type proxiedCluster struct {
	*testCluster
	stuckFwd bool
}

// newProxiedCluster starts three nodes behind proxies; forward links keep
// the connections of a stall stuck after the heal when stuckFwd is set.
func newProxiedCluster(t *testing.T, stuckFwd bool) *proxiedCluster {
	t.Helper()
	pc := &proxiedCluster{testCluster: layoutTestCluster(t, proccluster.Config{Nodes: 3, Proxies: true}), stuckFwd: stuckFwd}
	pc.startAll()
	return pc
}

// cut stalls (or heals) every link between node i and the others, both
// ways.
func (pc *proxiedCluster) cut(i int, stalled bool) {
	mode := testkit.LinkUp
	switch {
	case stalled && pc.stuckFwd:
		mode = testkit.LinkStall // Raft's links drop, forwarding's stall
	case stalled:
		mode = testkit.LinkDrop
	}
	_ = pc.Isolate(i, mode) // only LinkReject and TargetUp listen again, and can fail
}

func (pc *proxiedCluster) index(p *proc) int { return p.Index }

// replyClass sorts a command's outcome: "ok", "clusterdown" (certainly not
// applied), "uncertain" (may have been), or the error.
func replyClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case strings.HasPrefix(err.Error(), "CLUSTERDOWN "):
		return "clusterdown"
	case strings.HasPrefix(err.Error(), "UNCERTAIN "):
		return "uncertain"
	}
	return err.Error()
}

// TestPartitionedFollowerServesAfterHeal: a follower whose peer traffic
// goes silent for 30 s (its forwarding connections stay stuck after the
// heal, as TCP leaves them deep in retransmission backoff) serves again
// within 2 s of the heal; and no reply it gave hid a charge.
func TestPartitionedFollowerServesAfterHeal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes and holds a 30 s partition")
	}
	t.Parallel()
	pc := newProxiedCluster(t, true)
	pc.waitServing(pc.nodes...)
	ctx := context.Background()
	leader := pc.leader()
	var f *proc
	for _, p := range pc.nodes {
		if p != leader {
			f = p
			break
		}
	}
	if err := pc.client(leader).Do(ctx, "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
		t.Fatal(err)
	}
	r := pc.client(f)
	classes := map[string]int64{}
	var allowed int64
	probe := func() error {
		res, err := r.Do(ctx, "RL.TOKEN", "probe", 1000, "1/d").Int64Slice()
		classes[replyClass(err)]++
		if err == nil && res[0] == 1 {
			allowed++
		}
		return err
	}
	// Warm the follower's forwarding pool.
	for range 5 {
		if err := probe(); err != nil {
			t.Fatal(err)
		}
	}

	pc.cut(pc.index(f), true)
	cutUntil := time.Now().Add(30 * time.Second)
	for time.Now().Before(cutUntil) {
		start := time.Now()
		err := probe()
		if err == nil {
			t.Fatal("the cut-off follower answered a decision")
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("a command on the cut-off follower took %v (%v)", took, err)
		}
		time.Sleep(100 * time.Millisecond) // the probe's pace, not a wait for a condition
	}
	pc.cut(pc.index(f), false)
	healed := time.Now()
	for {
		err := probe()
		if err == nil {
			break
		}
		if time.Since(healed) > 10*time.Second {
			pc.dumpLogs()
			t.Fatalf("not serving 10 s after the heal: %v", err)
		}
	}
	recovered := time.Since(healed)
	t.Logf("served again %v after the heal; replies %v", recovered.Round(time.Millisecond), classes)
	if recovered > 2*time.Second {
		t.Errorf("served again %v after the heal, want within 2s", recovered)
	}

	// Nothing answered CLUSTERDOWN was applied: the key lost at least the
	// admitted units and at most those plus the UNCERTAIN ones.
	res, err := pc.client(leader).Do(ctx, "RL.PEEK", "probe").Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	used := 1000 - res[2]
	if used < allowed || used > allowed+classes["uncertain"] {
		t.Fatalf("%d units used; %d admitted, %d UNCERTAIN, %d CLUSTERDOWN", used, allowed, classes["uncertain"], classes["clusterdown"])
	}
	for class, n := range classes {
		if class != "ok" && class != "clusterdown" && class != "uncertain" {
			t.Fatalf("%d replies %q", n, class)
		}
	}
}

// TestLeaderCutTimeoutIsUncertain: a command sent to a leader just cut off
// from both followers is handed to Raft and gets no majority; its reply is
// UNCERTAIN (the entry may yet commit), never CLUSTERDOWN, and after the
// heal the key lost at most that unit.
func TestLeaderCutTimeoutIsUncertain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	pc := newProxiedCluster(t, false)
	pc.waitServing(pc.nodes...)
	ctx := context.Background()
	leader := pc.leader()
	r := pc.client(leader)
	if err := r.Do(ctx, "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Do(ctx, "RL.TOKEN", "cut", 10, "1/d").Err(); err != nil {
		t.Fatal(err)
	}
	pc.cut(pc.index(leader), true)
	start := time.Now()
	err := r.Do(ctx, "RL.TOKEN", "cut", 10, "1/d").Err()
	took := time.Since(start)
	if replyClass(err) != "uncertain" {
		t.Fatalf("reply %v after %v, want UNCERTAIN", err, took)
	}
	if took > 3*time.Second {
		t.Fatalf("reply after %v", took)
	}
	pc.cut(pc.index(leader), false)
	pc.waitServing(pc.nodes...)
	res, err := pc.client(pc.leader()).Do(ctx, "RL.PEEK", "cut").Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if used := 10 - res[2]; used < 1 || used > 2 {
		t.Fatalf("%d units used: want the acknowledged one, and perhaps the UNCERTAIN one", used)
	}
}
