package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/cluster"
	"github.com/sluice-rl/sluice/internal/testkit/proccluster"
)

// releaseV010 is the commit of sluice v0.1.0, the last release without
// cluster versions (cluster version 1); the upgrade test starts from it.
const releaseV010 = "ae62d5a"

// currentVersion is the cluster version this build runs and raises an
// upgraded cluster to.
var currentVersion = strconv.FormatUint(uint64(cluster.SupportedVersion), 10)

// releasePrev is main's commit when issue #30 began (cluster version 2,
// the version v0.2.0 runs): the cluster the next upgrade test starts from.
const releasePrev = "0631f27"

// releaseBinary builds sluice at commit from this repository's history
// (git archive into a temporary directory, then go build with
// main.version set to version), caching the binary under the temporary
// directory by commit so that reruns, and the other upgrade test, reuse
// it. It skips the test when the history is not available (a shallow
// clone).
func releaseBinary(t *testing.T, commit, version string) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--verify", "--quiet", commit+"^{commit}").Output()
	if err != nil {
		t.Skipf("git history with commit %s (%s) is not available here (%v): cannot build the older release", commit, version, err)
	}
	full := strings.TrimSpace(string(out))
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git work tree (%v): cannot build the older release", err)
	}
	cache := filepath.Join(os.TempDir(), "sluice-release-"+full)
	bin := filepath.Join(cache, "sluice")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	src, err := os.MkdirTemp(cache, "src-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(src)
	archive := exec.Command("git", "archive", "--format=tar", full)
	archive.Dir = strings.TrimSpace(string(top)) // the whole tree, not this directory's
	untar := exec.Command("tar", "-x", "-C", src)
	var stderr bytes.Buffer
	archive.Stderr, untar.Stderr = &stderr, &stderr
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, stderr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("untar %s: %v\n%s", commit, err, stderr.String())
	}
	tmp := filepath.Join(src, "sluice.bin")
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+version, "-o", tmp, "./cmd/sluice")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sluice at %s: %v\n%s", commit, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// startWith starts node p with the binary bin (the cluster's flags).
func (c *testCluster) startWith(p *proc, bin string) {
	c.t.Helper()
	p.Bin = bin
	c.start(p)
}

// startedWith is the line the upgrade tests' nodes write to their logs
// at each start.
func startedWith(p *proc) string { return "=== started with " + p.Bin }

// snapshot has p snapshot every group now (RAFT.SNAPSHOT), so that its
// next start restores a snapshot its binary wrote (in the upgrade tests,
// the other binary reads it).
func (c *testCluster) snapshot(p *proc) {
	c.t.Helper()
	if err := c.client(p).Do(context.Background(), "RAFT.SNAPSHOT").Err(); err != nil {
		c.t.Fatalf("RAFT.SNAPSHOT on %s: %v", p.ID, err)
	}
}

// startReleaseCluster starts three nodes of the release binary old with
// --shards shards and waits until they serve.
func startReleaseCluster(t *testing.T, old string, shards int) *testCluster {
	t.Helper()
	c := layoutTestCluster(t, proccluster.Config{Nodes: 3, Header: startedWith, Setup: func(ns []*proc) {
		for _, p := range ns {
			p.Extra = []string{"--shards", strconv.Itoa(shards)}
		}
	}})
	for _, p := range c.nodes {
		c.startWith(p, old)
	}
	c.waitServing(c.nodes...)
	return c
}

// upgradeLoad is clients on every node deciding on shared limits until
// stopped, tallying what each call told of its charge.
type upgradeLoad struct {
	mu      sync.Mutex
	tallies map[string]*limitTally
	calls   map[callOutcome]int
	stop    chan struct{}
	wg      sync.WaitGroup
}

const (
	upgradeKeys  = 24
	upgradeLimit = 40
)

func upgradeKey(i int) string { return "upgrade:" + strconv.Itoa(i) }

func (c *testCluster) startUpgradeLoad() *upgradeLoad {
	l := &upgradeLoad{tallies: map[string]*limitTally{}, calls: map[callOutcome]int{}, stop: make(chan struct{})}
	for i := range upgradeKeys {
		l.tallies[upgradeKey(i)] = &limitTally{}
	}
	c.upgradeClients(&l.wg, l.stop, 5*time.Second, func(_ *proc, r *redis.Client) func(key string) error {
		return func(key string) error {
			res, err := r.Do(context.Background(), "RL.TOKEN", key, upgradeLimit, "1/d").Int64Slice()
			out := classify(res, err)
			l.mu.Lock()
			l.calls[out]++
			switch out {
			case outAdmitted:
				l.tallies[key].admitted++
			case outUncertain:
				l.tallies[key].uncertain++
			}
			l.mu.Unlock()
			return err
		}
	})
	return l
}

// upgradeClients starts two clients on every node, each walking through
// the upgrade keys, one call at a time, until stop: client gives each
// client goroutine its call (and so its own state), which runs on r, a
// connection to node p whose calls time out after readTimeout. A client
// pauses 2 ms after a call, 20 ms after one that failed (a stopped node:
// do not spin).
func (c *testCluster) upgradeClients(wg *sync.WaitGroup, stop <-chan struct{}, readTimeout time.Duration, client func(p *proc, r *redis.Client) func(key string) error) {
	for w, p := range c.nodes {
		for k := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := redis.NewClient(&redis.Options{Addr: p.RESP, Protocol: 2, MaxRetries: -1,
					DialTimeout: time.Second, ReadTimeout: readTimeout, PoolSize: 1})
				defer r.Close()
				call := client(p, r)
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					if err := call(upgradeKey((n*7 + w*13 + k*29) % upgradeKeys)); err != nil {
						time.Sleep(20 * time.Millisecond)
					} else {
						time.Sleep(2 * time.Millisecond)
					}
				}
			}()
		}
	}
}

func (l *upgradeLoad) halt() {
	close(l.stop)
	l.wg.Wait()
}

// checkExact checks that every node agrees on every limit, that no limit
// admitted more than it allows, and that every acknowledged admission was
// charged (none lost): admitted <= charged <= admitted + uncertain.
func (c *testCluster) checkExact(l *upgradeLoad) {
	c.t.Helper()
	ctx := context.Background()
	l.mu.Lock()
	defer l.mu.Unlock()
	clients := make([]*redis.Client, len(c.nodes))
	for i, p := range c.nodes {
		clients[i] = c.client(p)
	}
	for key, tl := range l.tallies {
		charged := -1
		for i, p := range c.nodes {
			res, err := clients[i].Do(ctx, "RL.PEEK", key).Int64Slice()
			if err != nil || len(res) != 5 {
				c.t.Fatalf("RL.PEEK %s on %s: %v %v", key, p.ID, res, err)
			}
			got := upgradeLimit - int(res[2])
			if charged >= 0 && got != charged {
				c.t.Fatalf("%s: %s says %d charged, another node %d", key, p.ID, got, charged)
			}
			charged = got
		}
		if tl.admitted > upgradeLimit || charged < tl.admitted || charged > tl.admitted+tl.uncertain {
			c.t.Fatalf("%s: %d admitted and acknowledged, %d uncertain, %d charged of %d", key, tl.admitted, tl.uncertain, charged, upgradeLimit)
		}
	}
}

// waitDigests polls until every node's DEBUG DIGEST (its own replica's
// state) is the same.
func (c *testCluster) waitDigests(what string) {
	c.t.Helper()
	c.settle(30*time.Second, 100*time.Millisecond, what+": replicas' digests", func() string {
		var first string
		for _, p := range c.nodes {
			d, err := c.client(p).Do(context.Background(), "DEBUG", "DIGEST").Text()
			if err != nil {
				return p.ID + ": " + err.Error()
			}
			if first == "" {
				first = d
			} else if d != first {
				return fmt.Sprintf("%s's digest %s differs from %s", p.ID, d, first)
			}
		}
		return ""
	})
}

// clusterVersions returns RAFT.STATUS's cluster_version of every group
// on p ("" for a node of a release before versions).
func (c *testCluster) clusterVersions(p *proc, shards int) []string {
	c.t.Helper()
	var vs []string
	for g := range shards {
		st, err := c.raftStatus(p, g)
		if err != nil {
			c.t.Fatalf("RAFT.STATUS %d on %s: %v", g, p.ID, err)
		}
		vs = append(vs, st["cluster_version"])
	}
	return vs
}

// TestRollingUpgradeFromV010: three nodes of v0.1.0 (commit ae62d5a,
// built from git) under load from clients on every node, upgraded one at a
// time (SIGTERM, start the new binary on the same data dir); one node is
// rolled back to v0.1.0 while the cluster is mixed (its version is still
// 1), then upgraded again; with every node new, the version becomes 2 and
// v0.1.0 then refuses the data dirs. Each binary restores snapshots the
// other took (RAFT.SNAPSHOT before the restarts). Limits stay exact, nothing
// acknowledged is lost, and the replicas' digests agree at the end. With
// --shards 1 and --shards 3.
func TestRollingUpgradeFromV010(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	old := releaseBinary(t, releaseV010, "v0.1.0")
	for _, shards := range []int{1, 3} {
		t.Run("shards="+strconv.Itoa(shards), func(t *testing.T) { testRollingUpgrade(t, old, shards) })
	}
}

func testRollingUpgrade(t *testing.T, old string, shards int) {
	ctx := context.Background()
	c := startReleaseCluster(t, old, shards)
	if err := c.client(c.nodes[0]).Do(ctx, "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
		t.Fatal(err)
	}
	load := c.startUpgradeLoad()
	defer func() {
		select {
		case <-load.stop:
		default:
			load.halt()
		}
	}()
	// restart stops p (SIGTERM) and starts bin on its data dir, under load.
	restart := func(p *proc, bin string) {
		t.Helper()
		time.Sleep(300 * time.Millisecond) // load on the cluster as it was
		c.stop(p)
		c.startWith(p, bin)
		c.waitServing(c.nodes...)
	}
	mixed := func(when string, news ...*proc) {
		t.Helper()
		for _, p := range news {
			for g, v := range c.clusterVersions(p, shards) {
				if v != "1" {
					t.Fatalf("%s: %s reports cluster version %q for group %d in a mixed cluster, want 1", when, p.ID, v, g)
				}
			}
		}
	}
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	time.Sleep(300 * time.Millisecond)
	for _, p := range c.nodes {
		c.snapshot(p) // v0.1.0's snapshots, which the new binary restores
	}
	restart(n1, binary)
	mixed("n1 upgraded", n1)
	restart(n2, binary)
	mixed("n2 upgraded", n1, n2)
	// Roll n2 back while n3 still runs v0.1.0: the version is still 1,
	// and v0.1.0 restores the snapshot the new binary took.
	c.snapshot(n2)
	restart(n2, old)
	mixed("n2 rolled back", n1)
	restart(n2, binary)
	mixed("n2 upgraded again", n1, n2)
	restart(n3, binary)
	c.settle(30*time.Second, 100*time.Millisecond, "the cluster version", func() string {
		for _, p := range c.nodes {
			for g, v := range c.clusterVersions(p, shards) {
				if v != currentVersion {
					return fmt.Sprintf("%s: group %d at cluster version %q", p.ID, g, v)
				}
			}
		}
		return ""
	})
	time.Sleep(300 * time.Millisecond) // load at version 2
	load.halt()
	load.mu.Lock()
	t.Logf("calls: %d admitted, %d denied, %d not applied (errors), %d uncertain",
		load.calls[outAdmitted], load.calls[outDenied], load.calls[outNotApplied], load.calls[outUncertain])
	admitted := load.calls[outAdmitted]
	load.mu.Unlock()
	if admitted == 0 {
		t.Fatal("the load admitted nothing")
	}
	c.waitDigests("after the upgrade")
	c.checkExact(load)

	// v0.1.0 now refuses n1's data dir, saying why, and changes nothing;
	// the new binary restores its version 2 snapshot.
	c.snapshot(n1)
	c.stop(n1)
	stdout, stderr := refusedStart(t, "v0.1.0 on a cluster version 2 data dir", old, n1.Args(c.Peers, "--log-level", "warn")...)
	if msg := stderr + stdout; !strings.Contains(msg, "cluster version "+currentVersion+": it needs sluice ") {
		t.Fatalf("v0.1.0's refusal does not say why:\n%s", msg)
	}
	c.startWith(n1, binary)
	c.waitServing(c.nodes...)
	if v := c.clusterVersions(n1, shards); v[0] != currentVersion {
		t.Fatalf("n1 restarted on its snapshot: cluster version %v", v)
	}
	c.waitDigests("after the refused start")
	c.checkExact(load)
}

// TestRollingUpgradeFrom0631f27: three nodes (--shards 3) of commit
// 0631f27 (main when issue #30 began, cluster version 2; built from git)
// under load from clients on every node (INCRBY on shared counters),
// upgraded one at a time (SIGTERM, start this build on the same data dir),
// one node rolled back to 0631f27 while the cluster is mixed and upgraded
// again, each binary restoring snapshots the other took. Clients see no
// error but the connections of the node being restarted closing (or
// refused while it is down), and none of the commands those carried was
// applied: every counter ends at exactly the number of acknowledged
// increments, on every node. The cluster version stays 2 throughout.
func TestRollingUpgradeFrom0631f27(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	old := releaseBinary(t, releasePrev, "0631f27")
	const shards = 3
	c := startReleaseCluster(t, old, shards)
	c.waitNewestVersion(c.nodes...) // 0631f27 raises a new cluster's version by the poll
	load := c.startCounterLoad()
	defer load.halt()
	// restart replaces p's binary; while the cluster is mixed its version
	// stays 2, and once every node runs this build it rises to this build's
	// (waitNewestVersion below), under the load.
	restart := func(p *proc, bin string, mixed bool) {
		t.Helper()
		time.Sleep(300 * time.Millisecond) // load on the cluster as it was
		load.restarting(p.ID)
		c.stop(p)
		c.startWith(p, bin)
		c.waitServing(c.nodes...)
		load.restarting("")
		if !mixed {
			return
		}
		for _, q := range c.nodes {
			for g, v := range c.clusterVersions(q, shards) {
				if v != "2" {
					t.Fatalf("%s reports cluster version %q for group %d, want 2", q.ID, v, g)
				}
			}
		}
	}
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	time.Sleep(300 * time.Millisecond)
	for _, p := range c.nodes {
		c.snapshot(p) // 0631f27's snapshots, which this build restores
	}
	restart(n1, binary, true)
	restart(n2, binary, true)
	c.snapshot(n2) // this build's, which 0631f27 restores
	restart(n2, old, true)
	restart(n2, binary, true)
	restart(n3, binary, false)
	c.waitNewestVersion(c.nodes...)    // every node upgraded: the version rises
	time.Sleep(300 * time.Millisecond) // load on the upgraded cluster
	load.halt()
	c.checkCounters(load)
}

// counterLoad is clients on every node incrementing shared counters until
// halted, counting the acknowledged increments, and the errors: a
// transport error on a client of the node being restarted is expected
// (its connections close, dials are refused), until that client gets a
// reply again; any other error fails the test.
type counterLoad struct {
	mu      sync.Mutex
	acked   map[string]int64
	closed  int      // transport errors on the restarting node's clients
	bad     []string // any other error
	restart string   // the node being restarted, "" for none
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

func (c *testCluster) startCounterLoad() *counterLoad {
	l := &counterLoad{acked: map[string]int64{}, stop: make(chan struct{})}
	c.upgradeClients(&l.wg, l.stop, 10*time.Second, func(p *proc, r *redis.Client) func(key string) error {
		// cut: this client's connection to its node closed when the node
		// was restarted, and it has not got a reply since (go-redis
		// answers the last dial error for a while after the node is back,
		// without dialling).
		cut := false
		return func(key string) error {
			_, err := r.IncrBy(context.Background(), key, 1).Result()
			l.mu.Lock()
			defer l.mu.Unlock()
			var rerr redis.Error
			switch {
			case err == nil:
				l.acked[key]++
				cut = false
			case !errors.As(err, &rerr) && (l.restart == p.ID || cut):
				l.closed++
				cut = true
			default:
				l.bad = append(l.bad, fmt.Sprintf("%s on %s (restarting %q): %v", key, p.ID, l.restart, err))
			}
			return err
		}
	})
	return l
}

// restarting names the node being restarted ("" once it serves again).
func (l *counterLoad) restarting(id string) {
	l.mu.Lock()
	l.restart = id
	l.mu.Unlock()
}

func (l *counterLoad) halt() {
	l.once.Do(func() {
		close(l.stop)
		l.wg.Wait()
	})
}

// checkCounters fails the test for an error other than a restarting
// node's connections closing, and for a counter that differs, on any
// node, from the increments acknowledged: more would be a command whose
// connection closed yet applied (or one applied twice), fewer a lost one.
func (c *testCluster) checkCounters(l *counterLoad) {
	c.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var total int64
	for _, n := range l.acked {
		total += n
	}
	c.t.Logf("%d increments acknowledged, %d calls failed with the restarting node's connections", total, l.closed)
	if len(l.bad) > 0 {
		c.dumpLogs()
		c.t.Fatalf("%d errors beyond the restarting node's connections closing, the first: %s", len(l.bad), strings.Join(l.bad[:min(len(l.bad), 10)], "; "))
	}
	if total == 0 {
		c.t.Fatal("the load acknowledged nothing")
	}
	c.waitDigests("after the upgrade")
	for _, p := range c.nodes {
		r := c.client(p)
		for i := range upgradeKeys {
			key := upgradeKey(i)
			got, err := r.Get(context.Background(), key).Int64()
			if errors.Is(err, redis.Nil) {
				got, err = 0, nil
			}
			if err != nil || got != l.acked[key] {
				c.t.Fatalf("%s on %s: %d, %v; want the %d increments acknowledged", key, p.ID, got, err, l.acked[key])
			}
		}
	}
}
