package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/slots"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// The process tests of membership changes with several groups
// (docs/operations.md, "Replacing a machine" and "Growing and shrinking").

// memberLoad is clients on some nodes of a cluster deciding on limits of
// every group, as in TestShardedClusterKillLeader: each group's calls walk
// through its limits, callsPerLimit calls on each, under a frozen clock.
type memberLoad struct {
	t     *testing.T
	c     *testCluster
	table slots.Table
	tags  [shardCount]string

	*groupLoad[string]
	next  [shardCount]atomic.Int64
	stops map[*proc]chan struct{}
	wg    sync.WaitGroup
}

const memberLimit, memberCallsPerLimit = 10, 20

func newMemberLoad(t *testing.T, c *testCluster, prefix string) *memberLoad {
	l := &memberLoad{t: t, c: c, table: shardTable(t), groupLoad: newGroupLoad[string](c),
		stops: map[*proc]chan struct{}{}}
	for g := range l.tags {
		l.tags[g] = keyInGroup(l.table, prefix, g)
	}
	t.Cleanup(l.stopAll)
	return l
}

func (l *memberLoad) key(g int, i int64) string {
	return "{" + l.tags[g] + "}:" + strconv.FormatInt(i, 10)
}

// add starts two plain clients on node p (they never retry: a retry after
// a broken connection could apply a call twice behind one reply).
func (l *memberLoad) add(p *proc) {
	stop := make(chan struct{})
	l.stops[p] = stop
	for range 2 {
		cl := l.c.client(p)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				for g := range shardCount {
					select {
					case <-stop:
						return
					default:
					}
					key := l.key(g, l.next[g].Add(1)/memberCallsPerLimit)
					res, err := cl.Do(context.Background(), "RL.TOKEN", key, memberLimit, "1/d").Int64Slice()
					l.record(key, g, classify(res, err), err)
				}
			}
		}()
	}
}

// drop stops the clients on node p (an operator drains a node before
// removing it) and waits for their calls in flight.
func (l *memberLoad) drop(p *proc) {
	if stop := l.stops[p]; stop != nil {
		close(stop)
		delete(l.stops, p)
	}
}

func (l *memberLoad) stopAll() {
	for p := range l.stops {
		l.drop(p)
	}
	l.wg.Wait()
}

// waitDecided polls until every group has decided n more calls.
func (l *memberLoad) waitDecided(what string, n int64) {
	l.t.Helper()
	l.groupLoad.waitDecided(what, n, 0, 20*time.Second)
	// The errors clients saw since the last phase, for the log.
	l.mu.Lock()
	l.t.Logf("%s: errors since the last phase: %v", what, l.errs)
	l.errs = map[string]int{}
	l.mu.Unlock()
}

// check stops the load, spends every limit touched through node p, and
// fails the test when a limit admitted more than its budget, or when an
// error reply that says "not applied" hid a charge.
func (l *memberLoad) check(p *proc) {
	l.t.Helper()
	l.stopAll()
	cl := l.c.client(p)
	_, uncertain := l.spendAll(memberLimit, func(key string) bool {
		res, err := cl.Do(context.Background(), "RL.TOKEN", key, memberLimit, "1/d").Int64Slice()
		if err != nil || len(res) != 5 {
			l.t.Fatalf("spending %s: %v %v", key, res, err)
		}
		return res[0] != 0
	})
	l.t.Logf("%d decisions on %d limits, %d uncertain calls", l.decisions(), len(l.tallies), uncertain)
}

// newJoiner lays out node id, empty, and starts it with --no-bootstrap
// and the cluster's --shards: it waits to be joined.
func (c *testCluster) newJoiner(id string) *proc {
	c.t.Helper()
	p, err := c.Joiner(id, c.t.TempDir()+"/"+id)
	if err != nil {
		c.t.Fatal(err)
	}
	p.Extra = []string{"--shards", strconv.Itoa(shardCount)}
	c.startJoiner(p)
	return p
}

// startJoiner starts p without --peers, with --no-bootstrap.
func (c *testCluster) startJoiner(p *proc) {
	c.t.Helper()
	c.start(p)
	// It serves no command yet (no group knows a leader): it answers PING
	// with LOADING once it listens, until it is joined and serves.
	testkit.Eventually(c.t, 10*time.Second, 20*time.Millisecond, func() error {
		r := c.probe(p)
		defer r.Close()
		if err := r.Ping(context.Background()).Err(); err != nil && !strings.HasPrefix(err.Error(), "LOADING ") {
			return fmt.Errorf("%s does not answer PING: %w", p.ID, err)
		}
		return nil
	})
}

// admin sends a membership command to node p and returns its error.
func (c *testCluster) admin(p *proc, args ...any) error {
	r := redis.NewClient(&redis.Options{Addr: p.RESP, Protocol: 2, MaxRetries: -1, ReadTimeout: 2 * time.Minute})
	defer r.Close()
	start := time.Now()
	err := r.Do(context.Background(), args...).Err()
	c.t.Logf("%v sent to %s: %v (%s)", args, p.ID, err, time.Since(start).Round(time.Millisecond))
	return err
}

// followerOf returns a running node that does not lead group g.
func (c *testCluster) followerOf(g int) *proc {
	c.t.Helper()
	for _, p := range c.nodes {
		if st, err := c.raftStatus(p, g); err == nil && st["role"] == "follower" {
			return p
		}
	}
	c.t.Fatalf("no follower of group %d", g)
	return nil
}

// without returns c.nodes without p.
func (c *testCluster) without(p *proc) []*proc {
	return slices.DeleteFunc(slices.Clone(c.nodes), func(q *proc) bool { return q == p })
}

// waitVoters polls until every node reports, for every group, exactly the
// voters of c.nodes and no non-voter.
func (c *testCluster) waitVoters() {
	c.t.Helper()
	var ids []string
	for _, p := range c.nodes {
		ids = append(ids, p.ID)
	}
	slices.Sort(ids)
	want := strings.Join(ids, ",")
	c.settle(20*time.Second, 100*time.Millisecond, "the membership", func() string {
		for _, p := range c.nodes {
			for g := range shardCount {
				st, err := c.raftStatus(p, g)
				if err != nil || st["voters"] != want || st["nonvoters"] != "" {
					return fmt.Sprintf("%s: group %d: voters %q nonvoters %q (%v), want voters %s", p.ID, g, st["voters"], st["nonvoters"], err, want)
				}
			}
		}
		return ""
	})
}

// waitSameDigest polls until every node has applied the same log of every
// group, then requires every node's DEBUG DIGEST to be the same.
func (c *testCluster) waitSameDigest() {
	c.t.Helper()
	ctx := context.Background()
	c.settle(30*time.Second, 100*time.Millisecond, "the replicas' digests", func() string {
		var idx []string
		for g := range shardCount {
			first := ""
			for i, p := range c.nodes {
				st, err := c.raftStatus(p, g)
				if err != nil || st["applied_index"] != st["commit_index"] {
					return fmt.Sprintf("%s: group %d: applied %s commit %s %v", p.ID, g, st["applied_index"], st["commit_index"], err)
				}
				if i == 0 {
					first = st["applied_index"]
				} else if st["applied_index"] != first {
					return fmt.Sprintf("group %d applied %s on %s, %s on %s", g, first, c.nodes[0].ID, st["applied_index"], p.ID)
				}
			}
			idx = append(idx, first)
		}
		var ds []string
		for _, p := range c.nodes {
			r := c.probe(p)
			d, err := r.Do(ctx, "DEBUG", "DIGEST").Text()
			r.Close()
			if err != nil {
				return fmt.Sprintf("%s: DEBUG DIGEST: %v", p.ID, err)
			}
			ds = append(ds, p.ID+"="+d)
		}
		for _, d := range ds[1:] {
			if d[strings.Index(d, "=")+1:] != ds[0][strings.Index(ds[0], "=")+1:] {
				return fmt.Sprintf("the replicas differ at applied indexes %v: %v", idx, ds)
			}
		}
		c.t.Logf("replicas equal at applied indexes %v: %s", idx, ds[0])
		return ""
	})
}

// TestShardedClusterMembership: three nodes with --shards 3 under load
// from clients on every node sharing limits. One node is killed with
// SIGKILL and its data dir wiped; removing a live node is then refused (it
// would cost every group its majority), and so is a join with an address
// nothing listens on; a new node started empty with --no-bootstrap is
// joined (sent to a follower, which forwards each group's step to that
// group's leader) and the dead one removed. Every group ends with the
// three live nodes as voters and leaders balanced over them. Then the
// cluster grows to five nodes and shrinks back to three (removing, among
// others, a group's leader), under load. No limit admits more than its
// budget, no "not applied" error hid a charge, and every replica holds the
// same state.
func TestShardedClusterMembership(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	start := time.Now()
	c := newBalancedShardCluster(t, false)
	if err := c.client(c.nodes[0]).Do(context.Background(), "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
		t.Fatal(err)
	}
	load := newMemberLoad(t, c, "member")
	for _, p := range c.nodes {
		load.add(p)
	}
	load.waitDecided("before the kill", 100)

	// n3 dies with its disk.
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	load.drop(n3)
	c.kill(n3)
	if err := os.RemoveAll(n3.Dir); err != nil {
		t.Fatal(err)
	}
	if err := c.admin(n1, "RAFT.REMOVE", "n2"); err == nil || !strings.HasPrefix(err.Error(), `ERR refused: removing "n2" would leave group `) {
		t.Fatalf("removing a live node while another is dead: %v, want it refused", err)
	}
	n4 := c.newJoiner("n4")
	closed := freeAddr(t)
	if err := c.admin(n2, "RAFT.JOIN", "n4", closed); err == nil || !strings.HasPrefix(err.Error(), "ERR invalid raft address: cannot reach "+closed) {
		t.Fatalf("join with an address nothing listens on: %v, want it refused", err)
	}
	if err := c.admin(n4, "RAFT.STATUS"); err != nil {
		t.Fatalf("RAFT.STATUS on a node waiting to be joined: %v", err)
	}
	c.nodes = c.without(n3)
	if err := c.admin(c.followerOf(0), "RAFT.JOIN", "n4", n4.Raft); err != nil {
		c.dumpLogs()
		t.Fatalf("join n4: %v", err)
	}
	if err := c.admin(n4, "RAFT.REMOVE", "n3"); err != nil {
		c.dumpLogs()
		t.Fatalf("remove the dead n3: %v", err)
	}
	c.nodes = append(c.nodes, n4)
	c.waitVoters()
	c.waitBalanced(30 * time.Second)
	load.add(n4)
	load.waitDecided("after the replacement", 100)
	t.Logf("replaced n3 by n4 %s into the test", time.Since(start).Round(time.Millisecond))

	// Grow to five.
	n5, n6 := c.newJoiner("n5"), c.newJoiner("n6")
	if err := c.admin(n1, "RAFT.JOIN", "n5", n5.Raft); err != nil {
		t.Fatalf("join n5: %v", err)
	}
	if err := c.admin(n4, "RAFT.JOIN", "n6", n6.Raft); err != nil {
		t.Fatalf("join n6: %v", err)
	}
	c.nodes = append(c.nodes, n5, n6)
	c.waitVoters()
	load.add(n5)
	load.add(n6)
	load.waitDecided("with five nodes", 100)

	// Shrink to three: n1 leads group 0 (balanced), so its removal hands
	// that leadership over first.
	for _, p := range []*proc{n1, n5} {
		load.drop(p)
		if err := c.admin(n6, "RAFT.REMOVE", p.ID); err != nil {
			c.dumpLogs()
			t.Fatalf("remove %s: %v", p.ID, err)
		}
		c.nodes = c.without(p)
		c.kill(p)
	}
	c.waitVoters()
	c.waitBalanced(30 * time.Second)
	load.waitDecided("after shrinking to three", 100)
	load.check(c.nodes[0])
	c.waitSameDigest()
	t.Logf("done in %s", time.Since(start).Round(time.Millisecond))
}

// TestJoinCatchUpTime measures how long RAFT.JOIN takes to bring a new
// node up to date with a cluster of three nodes (--shards 3) holding
// SLUICE_JOIN_KEYS keys (skipped when unset; docs/operations.md quotes a
// run with 1000000): the keys are loaded with pipelined RL.TOKEN on every
// node (and with SLUICE_JOIN_ENTRIES, that many more one-command entries
// per group, then a snapshot on every node, so that the join starts with a
// snapshot), then a fourth node started empty is joined, and the test
// waits until every replica holds the same state.
func TestJoinCatchUpTime(t *testing.T) {
	keys, _ := strconv.Atoi(os.Getenv("SLUICE_JOIN_KEYS"))
	if keys <= 0 {
		t.Skip("set SLUICE_JOIN_KEYS to a key count to measure a join's catch-up")
	}
	c := newBalancedShardCluster(t, false)
	ctx := context.Background()
	start := time.Now()
	const pipeline = 1000
	var wg sync.WaitGroup
	var next atomic.Int64
	var failed atomic.Value
	for _, p := range c.nodes {
		for range 2 {
			cl := c.client(p)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					first := next.Add(pipeline) - pipeline
					if first >= int64(keys) {
						return
					}
					pipe := cl.Pipeline()
					for i := first; i < min(first+pipeline, int64(keys)); i++ {
						pipe.Do(ctx, "RL.TOKEN", "k:"+strconv.FormatInt(i, 10), 100, "1/d")
					}
					if _, err := pipe.Exec(ctx); err != nil {
						failed.Store(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("loading keys: %v", err)
	}
	t.Logf("loaded %d keys in %s", keys, time.Since(start).Round(time.Millisecond))
	if entries, _ := strconv.Atoi(os.Getenv("SLUICE_JOIN_ENTRIES")); entries > 0 {
		// As in a cluster that has run a while: more entries than a
		// snapshot keeps (10240 trailing entries past the 8192 that
		// trigger one), then a snapshot on every node, so that the new
		// node's catch-up starts with a snapshot of every key.
		start = time.Now()
		table := shardTable(t)
		for g := range shardCount {
			cl := c.client(c.preferred(g))
			key := keyInGroup(table, "entries", g)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range entries {
					if err := cl.Do(ctx, "RL.TOKEN", key, 100, "1/s").Err(); err != nil {
						failed.Store(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			t.Fatalf("writing entries: %v", err)
		}
		for _, p := range c.nodes {
			if err := c.admin(p, "RAFT.SNAPSHOT"); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%d more entries per group, and a snapshot on every node, in %s", entries, time.Since(start).Round(time.Millisecond))
	}
	n4 := c.newJoiner("n4")
	start = time.Now()
	if err := c.admin(c.nodes[0], "RAFT.JOIN", "n4", n4.Raft); err != nil {
		c.dumpLogs()
		t.Fatalf("join n4: %v", err)
	}
	joined := time.Since(start)
	c.nodes = append(c.nodes, n4)
	c.waitSameDigest()
	t.Logf("join of a node to %d keys: voter in every group after %s, same state as the others after %s",
		keys, joined.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
