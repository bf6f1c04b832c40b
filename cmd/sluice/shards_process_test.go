package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/internal/pyredis"
	"github.com/sluice-rl/sluice/internal/slots"
)

// The process tests of a sharded cluster: three real nodes, each running
// three Raft groups (--shards 3), so that each node leads one slot range
// once the leaders are balanced, driven by the cluster-aware clients Redis
// users have and by plain ones.

// TestShardedClusterClients: three real processes with --shards 3, with
// and without --redirect. Each node leads one group once balanced and
// every node says so in CLUSTER SLOTS, NODES and INFO; a plain client on
// any node is served for keys of every group (forwarded), or MOVED to the
// group's leader with --redirect; the cluster-aware clients Redis users
// have work with their defaults against keys of every group; and a limit
// shared by clients on every node admits exactly its limit in each group.
func TestShardedClusterClients(t *testing.T) {
	eachRedirect(t, testShardedClusterClients)
}

func testShardedClusterClients(t *testing.T, redirect bool) {
	c := newBalancedShardCluster(t, redirect)
	table := shardTable(t)
	ctx := context.Background()
	// follower returns a node that does not lead group g.
	follower := func(g int) *proc { return c.preferred(g + 1) }

	// A plain client on every node, keys of every group: served (the
	// node forwards to the group's leader), or with --redirect MOVED to
	// the leader unless this node leads the group.
	served := 0
	for _, p := range c.nodes {
		for g := range shardCount {
			key := keyInGroup(table, "plain:"+p.ID, g)
			res, err := c.client(p).Do(ctx, "RL.TOKEN", key, "5", "1/h").Int64Slice()
			if leader := c.preferred(g); redirect && leader != p {
				if want := fmt.Sprintf("MOVED %d %s", slots.Of([]byte(key)), leader.RESP); err == nil || err.Error() != want {
					t.Fatalf("plain client on %s, key %s of group %d: %v %v, want %s", p.ID, key, g, res, err, want)
				}
				continue
			}
			if err != nil || len(res) != 5 || res[0] != 1 || res[2] != 4 {
				t.Fatalf("plain client on %s, key %s of group %d: %v %v", p.ID, key, g, res, err)
			}
			served++
		}
	}
	// DBSIZE, keyless, runs on any node and counts every group's keys.
	for _, p := range c.nodes {
		if n, err := c.client(p).DBSize(ctx).Result(); err != nil || n != int64(served) {
			t.Fatalf("DBSIZE on %s: %d %v, want %d", p.ID, n, err, served)
		}
	}

	// go-redis's ClusterClient, defaults, seeded with each node in turn.
	for _, p := range c.nodes {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{p.RESP}})
		for g := range shardCount {
			key := keyInGroup(table, "gr:"+p.ID, g)
			got, err := cc.Do(ctx, "RL.TOKEN", key, "100", "1/h").Int64Slice()
			if err != nil || len(got) != 5 || got[0] != 1 || got[2] != 99 {
				t.Fatalf("ClusterClient seeded with %s, key %s of group %d: %v %v", p.ID, key, g, got, err)
			}
		}
		cc.Close()
	}

	// rueidis, defaults (client-side caching on), seeded with one node: it
	// learns the three masters and routes by key.
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{c.nodes[0].RESP}})
	if err != nil {
		t.Fatalf("rueidis: %v", err)
	}
	defer rc.Close()
	for g := range shardCount {
		key := keyInGroup(table, "ru", g)
		got, err := rc.Do(ctx, rc.B().Arbitrary("RL.TOKEN").Keys(key).Args("100", "1/h").Build()).AsIntSlice()
		if err != nil || len(got) != 5 || got[0] != 1 || got[2] != 99 {
			t.Fatalf("rueidis, key %s of group %d: %v %v", key, g, got, err)
		}
	}
	if nodes := rc.Nodes(); len(nodes) != len(c.nodes) {
		t.Fatalf("rueidis nodes %v: want the three members", nodes)
	}

	// A limit per group shared by cluster clients seeded on every node
	// and (without --redirect) plain clients on every node admits exactly
	// its limit. Nothing fails here, unless the machine stalls long
	// enough for an election: then a call refused as not applied
	// (CLUSTERDOWN) is tried again, as go-redis's cluster client does on
	// its own, and one that may have applied (UNCERTAIN) is counted as
	// such: the admissions may never pass the limit, and with those
	// calls they must reach it.
	const limit = 30
	var admitted, uncertain [shardCount]atomic.Int64
	var wg sync.WaitGroup
	for _, p := range c.nodes {
		ccp := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{p.RESP}})
		defer ccp.Close()
		clients := []doer{ccp}
		if !redirect {
			clients = append(clients, c.client(p))
		}
		for _, cl := range clients {
			for g := range shardCount {
				key := "{" + keyInGroup(table, "shared", g) + "}limit"
				wg.Add(1)
				go func() {
					defer wg.Done()
					deadline := time.Now().Add(30 * time.Second)
					for i := 0; i < limit; i++ {
						res, err := cl.Do(ctx, "RL.TOKEN", key, limit, "1/d").Int64Slice()
						switch classify(res, err) {
						case outAdmitted:
							admitted[g].Add(1)
						case outUncertain:
							uncertain[g].Add(1)
							t.Logf("shared limit %s: %v", key, err)
						case outNotApplied:
							if time.Now().After(deadline) {
								t.Errorf("shared limit %s: %v", key, err)
								return
							}
							t.Logf("shared limit %s: %v (trying again)", key, err)
							time.Sleep(50 * time.Millisecond)
							i--
						}
					}
				}()
			}
		}
	}
	wg.Wait()
	for g := range shardCount {
		n, u := admitted[g].Load(), uncertain[g].Load()
		if n > limit || n+u < limit {
			t.Errorf("group %d: a limit of %d shared across nodes admitted %d (and %d calls may have applied)", g, limit, n, u)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// redis-cli -c, pointed at a node that does not lead the key's group.
	if path, err := exec.LookPath("redis-cli"); err == nil {
		for g := range shardCount {
			key := keyInGroup(table, "cli", g)
			host, port, _ := strings.Cut(follower(g).RESP, ":")
			out, err := exec.Command(path, "-c", "-h", host, "-p", port, "RL.TOKEN", key, "7", "1/h").CombinedOutput()
			if got := strings.Fields(string(out)); err != nil || len(got) != 5 || got[0] != "1" || got[1] != "7" || got[2] != "6" {
				t.Fatalf("redis-cli -c, key %s of group %d: %v\n%s", key, g, err, out)
			}
		}
	} else {
		t.Log("no redis-cli: skipping its check")
	}

	// redis-py's RedisCluster (Debian's python3-redis), a key per group.
	if python := pyredis.Find("redis.cluster"); python != "" {
		host, port, _ := strings.Cut(c.nodes[1].RESP, ":")
		args := []string{"testdata/rediscluster.py", host, port}
		want := "nodes 3"
		for g := range shardCount {
			key := keyInGroup(table, "py", g)
			slot := strconv.Itoa(slots.Of([]byte(key)))
			args = append(args, key)
			want += "\nslot " + slot + "\ntoken [1, 100, 99, 0, 3600000]\nkeyslot " + slot
		}
		out, err := exec.Command(python, args...).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Fatalf("redis-py RedisCluster: %v\n%s\nwant:\n%s", err, out, want)
		}
	} else {
		t.Log("no python3 with redis-py: skipping RedisCluster")
	}

	// ioredis's Cluster, when .ci/run has installed it: three masters,
	// and RL.TOKEN (which it sends to a random master) served for keys of
	// every group, forwarded or through MOVED.
	if dir, node := os.Getenv("SLUICE_NODE_MODULES"), nodeBinary(); dir != "" && node != "" {
		host, port, _ := strings.Cut(c.nodes[2].RESP, ":")
		args := []string{host, port}
		want := "masters 3\nall 3"
		for g := range shardCount {
			args = append(args, keyInGroup(table, "io", g))
			want += "\ntoken [1,10,9,0,3600000]\nexists 1"
		}
		out, err := runNodeScript(t, node, dir, "testdata/iocluster.mjs", args...)
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Fatalf("ioredis Cluster: %v\n%s\nwant:\n%s", err, out, want)
		}
	} else {
		t.Log("SLUICE_NODE_MODULES or node not set up: skipping ioredis Cluster")
	}

	// redis-benchmark --cluster reads CLUSTER NODES, finds the three
	// masters and sends each key to its master: its {tag} placeholder
	// becomes a hash tag of a slot the connection's master serves. A
	// short run has no error and puts keys in every group. Without
	// --redirect a key without a tag, sent to whichever master, is
	// forwarded and works too.
	if path, err := exec.LookPath("redis-benchmark"); err == nil {
		host, port, _ := strings.Cut(c.nodes[0].RESP, ":")
		keys := []string{"bench:{tag}:__rand_int__"}
		if !redirect {
			keys = append(keys, "benchfwd:__rand_int__")
		}
		for _, key := range keys {
			out, err := exec.Command(path, "--cluster", "-h", host, "-p", port, "-n", "1500", "-c", "6", "-r", "100000", "-q",
				"RL.TOKEN", key, "1000", "1/s").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "requests per second") || strings.Contains(strings.ToLower(string(out)), "error") {
				t.Fatalf("redis-benchmark --cluster, key %s: %v\n%s", key, err, out)
			}
			for g := range shardCount {
				if m := c.preferred(g); !strings.Contains(string(out), fmt.Sprintf(": %s %s\n", c.clusterID(m), m.RESP)) {
					t.Fatalf("redis-benchmark --cluster did not list %s, group %d's leader, as a master:\n%s", m.ID, g, out)
				}
			}
			prefix, _, _ := strings.Cut(key, ":")
			names, err := c.client(c.nodes[1]).Keys(ctx, prefix+":*").Result()
			if err != nil {
				t.Fatalf("KEYS %s:*: %v", prefix, err)
			}
			var perGroup [shardCount]int
			for _, k := range names {
				perGroup[table.Group(slots.Of([]byte(k)))]++
			}
			if slices.Contains(perGroup[:], 0) {
				t.Fatalf("redis-benchmark --cluster, key %s: keys per group %v", key, perGroup)
			}
		}
	} else {
		t.Log("no redis-benchmark: skipping its check")
	}
}

// TestShardedClusterKillLeader: three nodes with --shards 3, with and
// without --redirect; cluster clients and plain clients on every node
// decide on limits of every group while the node leading group 1 is killed
// with SIGKILL and later restarted on its data dir. The other groups keep
// serving, group 1 gets a new leader and serves, every limit stays exact
// (acknowledged admissions never exceed it, and once spent, they plus the
// calls that may have been applied reach it: no error reply that says
// "not applied", MOVED included, hid a charge), and after the restart the
// leaderships move back into balance.
func TestShardedClusterKillLeader(t *testing.T) {
	eachRedirect(t, testShardedClusterKillLeader)
}

func testShardedClusterKillLeader(t *testing.T, redirect bool) {
	c := newBalancedShardCluster(t, redirect)
	table := shardTable(t)
	ctx := context.Background()
	// A frozen, replicated clock (every group's): no refill, so each
	// limit is exact.
	if err := c.client(c.nodes[0]).Do(ctx, "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
		t.Fatal(err)
	}

	// Each group's calls walk through its limits, callsPerLimit calls on
	// each, so that many limits are spent while the leader dies.
	const limit, callsPerLimit = 10, 20
	var tags [shardCount]string
	for g := range tags {
		tags[g] = keyInGroup(table, "kill", g)
	}
	limitKey := func(g int, i int64) string { return "{" + tags[g] + "}:" + strconv.FormatInt(i, 10) }
	l := newGroupLoad[string](c)
	var next [shardCount]atomic.Int64
	for _, p := range c.nodes {
		// A plain client (with --redirect, MOVED for the groups its
		// node does not lead), and a cluster client that knows every
		// node. Neither retries: a retry after a broken connection could
		// apply a call twice behind one reply. (The cluster client still
		// reloads the slots on MOVED, and follows them on the next call.)
		plain := c.client(p)
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{p.RESP, c.nodes[0].RESP, c.nodes[1].RESP, c.nodes[2].RESP},
			MaxRedirects: -1, DialTimeout: time.Second, ReadTimeout: 5 * time.Second})
		defer cc.Close()
		for _, cl := range []doer{plain, cc} {
			g := 0 // each group in turn
			l.start(func() {
				key := limitKey(g, next[g].Add(1)/callsPerLimit)
				res, err := cl.Do(ctx, "RL.TOKEN", key, limit, "1/d").Int64Slice()
				l.record(key, g, classify(res, err), err)
				g = (g + 1) % shardCount
			})
		}
	}
	defer l.stop()
	l.waitDecided("before the kill", 100, 0, 30*time.Second)

	victim := c.preferred(1)
	killed := time.Now()
	c.kill(victim)
	var alive []*proc
	for _, p := range c.nodes {
		if p != victim {
			alive = append(alive, p)
		}
	}
	// The groups the victim did not lead keep serving: they lost a
	// follower, not their leader.
	for g := range shardCount {
		if g == 1 {
			continue
		}
		c.settle(10*time.Second, 20*time.Millisecond, fmt.Sprintf("group %d's service", g), func() string {
			if l.lastOK[g].Load() <= killed.UnixNano() {
				return fmt.Sprintf("group %d, led by %s, not served for 10s after %s was killed", g, c.preferred(g).ID, victim.ID)
			}
			return ""
		})
		t.Logf("group %d served %s after the kill", g, time.Duration(l.lastOK[g].Load()-killed.UnixNano()).Round(time.Millisecond))
	}
	// Group 1 elects a leader among the survivors, which say so, and
	// serves again.
	c.waitShards(alive, 30*time.Second, func(masters []string) string {
		if masters[1] == victim.RESP {
			return "group 1 still mastered by the killed node"
		}
		return ""
	})
	l.waitDecided("after the kill", 50, killed.UnixNano(), 30*time.Second)
	t.Logf("group 1 served %s after the kill", time.Duration(l.lastOK[1].Load()-killed.UnixNano()).Round(time.Millisecond))

	// The victim restarts on its data dir, under load; leaderships
	// move back into balance, and every group serves.
	c.start(victim)
	c.waitServing(victim)
	c.waitBalanced(60 * time.Second)
	l.waitDecided("after the rebalance", 50, time.Now().UnixNano(), 30*time.Second)
	l.stop()

	// Spend every limit touched, through a node that leads its group
	// (nothing is failing now: every call must get a decision).
	direct := make([]*redis.Client, shardCount)
	for g := range direct {
		direct[g] = c.client(c.preferred(g))
	}
	exact, uncertain := l.spendAll(limit, func(key string) bool {
		res, err := direct[table.Group(slots.Of([]byte(key)))].Do(ctx, "RL.TOKEN", key, limit, "1/d").Int64Slice()
		if err != nil || len(res) != 5 {
			t.Fatalf("spending %s: %v %v", key, res, err)
		}
		return res[0] != 0
	})
	t.Logf("%d decisions on %d limits, %d uncertain calls; %d limits admitted exactly %d acknowledged calls; errors: %v",
		l.decisions(), len(l.tallies), uncertain, exact, limit, l.errs)
}

// TestShardedClusterRestart: three nodes with --shards 3 restarted all at
// once, first stopped cleanly and then killed: no acknowledged decision of
// any group is lost (each limit continues where it was, on every node) and
// the leaders balance again; and a node given --shards 2 on its 3-shard
// data dir refuses to start, naming both counts, and leaves the data dir
// as it was.
func TestShardedClusterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := newBalancedShardCluster(t, false)
	table := shardTable(t)
	ctx := context.Background()
	if err := c.client(c.nodes[0]).Do(ctx, "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
		t.Fatal(err)
	}
	const limit = 10
	var keys [shardCount]string
	spent := func(g int) int { return g + 2 } // a different count per group
	for g := range keys {
		keys[g] = keyInGroup(table, "restart", g)
		r := c.client(c.preferred(g + 1)) // a follower of the group: forwarded
		for i := range spent(g) {
			res, err := r.Do(ctx, "RL.TOKEN", keys[g], limit, "1/d").Int64Slice()
			if err != nil || res[0] != 1 || res[2] != int64(limit-1-i) {
				t.Fatalf("RL.TOKEN %s: %v %v", keys[g], res, err)
			}
		}
	}
	// peekAll checks that every node sees each group's limit with want(g)
	// calls spent.
	peekAll := func(when string, want func(g int) int) {
		t.Helper()
		for _, p := range c.nodes {
			for g, key := range keys {
				res, err := c.client(p).Do(ctx, "RL.PEEK", key).Int64Slice()
				if err != nil || len(res) != 5 || res[2] != int64(limit-want(g)) {
					t.Fatalf("%s: RL.PEEK %s (group %d) on %s: %v %v, want %d left", when, key, g, p.ID, res, err, limit-want(g))
				}
			}
		}
	}
	peekAll("before the restarts", spent)

	for round, halt := range []func(*proc){c.stop, c.kill} {
		for _, p := range c.nodes {
			halt(p)
		}
		for _, p := range c.nodes {
			c.start(p)
		}
		c.waitServing(c.nodes...)
		c.waitBalanced(60 * time.Second)
		peekAll(fmt.Sprintf("restart %d", round+1), func(g int) int { return spent(g) + round })
		// The limits continue where they were.
		for g, key := range keys {
			res, err := c.client(c.nodes[g]).Do(ctx, "RL.TOKEN", key, limit, "1/d").Int64Slice()
			if want := int64(limit - spent(g) - round - 1); err != nil || res[0] != 1 || res[2] != want {
				t.Fatalf("restart %d: RL.TOKEN %s: %v %v, want %d left", round+1, key, res, err, want)
			}
		}
	}
	after := func(g int) int { return spent(g) + 2 }
	peekAll("after the restarts", after)

	// A node restarted with --shards 2 on its 3-shard data dir refuses.
	p := c.nodes[0]
	c.kill(p)
	nd := *p.Node
	nd.Extra = []string{"--shards", "2"}
	_, msg := refusedStart(t, "--shards 2 on a 3-shard data dir", binary, nd.Args(c.Peers, "--log-level", "warn")...)
	if !strings.Contains(msg, "--shards 3") || !strings.Contains(msg, "--shards 2") {
		t.Fatalf("--shards 2 on a 3-shard data dir: the error names not both counts:\n%s", msg)
	}
	// The refusal changed nothing: with its own count the node serves its
	// data again.
	c.start(p)
	c.waitServing(p)
	peekAll("after the refused start", after)
}
