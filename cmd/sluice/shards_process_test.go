package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
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

// shardCount is the --shards of these tests: as many groups as nodes.
const shardCount = 3

// newShardCluster starts three nodes with --shards 3, and --redirect when
// redirect is set.
func newShardCluster(t *testing.T, redirect bool) *testCluster {
	t.Helper()
	return newTestClusterWith(t, 3, func(nodes []*proc) {
		for _, p := range nodes {
			p.Extra = append(p.Extra, "--shards", strconv.Itoa(shardCount))
			if redirect {
				p.Extra = append(p.Extra, "--redirect")
			}
		}
	})
}

// newBalancedShardCluster is newShardCluster, once every node serves,
// every group is led by its preferred member and runs the newest cluster
// version (so the tests may send the string commands and the rate limit
// service's, which a group refuses until then).
func newBalancedShardCluster(t *testing.T, redirect bool) *testCluster {
	t.Helper()
	c := newShardCluster(t, redirect)
	c.waitServing(c.nodes...)
	c.waitBalanced(60 * time.Second)
	c.waitNewestVersion(c.nodes...)
	return c
}

// eachRedirect runs test as two subtests, without --redirect and with it;
// it skips in -short mode, as the tests start processes.
func eachRedirect(t *testing.T, test func(t *testing.T, redirect bool)) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, redirect := range []bool{false, true} {
		t.Run(fmt.Sprintf("redirect=%v", redirect), func(t *testing.T) { test(t, redirect) })
	}
}

// shardTable is the slot table of the nodes: shardCount even ranges.
func shardTable(t *testing.T) slots.Table {
	t.Helper()
	table, err := slots.Even(shardCount)
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// keyInGroup returns prefix:i for the smallest i whose slot group g owns.
func keyInGroup(table slots.Table, prefix string, g int) string {
	for i := 0; ; i++ {
		k := prefix + ":" + strconv.Itoa(i)
		if table.Group(slots.Of([]byte(k))) == g {
			return k
		}
	}
}

// preferred returns the node that leads group g once leaderships are
// balanced: the nodes in ID order, group g on the (g mod n)-th.
func (c *testCluster) preferred(g int) *proc {
	ps := slices.Clone(c.nodes)
	slices.SortFunc(ps, func(a, b *proc) int { return strings.Compare(a.ID, b.ID) })
	return ps[g%len(ps)]
}

// byAddr returns the node whose RESP address is addr, or nil.
func (c *testCluster) byAddr(addr string) *proc {
	for _, p := range c.nodes {
		if p.RESP == addr {
			return p
		}
	}
	return nil
}

// shardMasters reads node p's view of the cluster and returns the RESP
// address of each group's master, or a problem: CLUSTER SLOTS must list
// the table's ranges in order, each with its master first and every other
// member as a replica, with one id per node; CLUSTER INFO must say ok;
// CLUSTER NODES must end every line with a line feed, use CLUSTER SLOTS'
// ids, flag p as myself, flag each master "master" with "-" as its master
// and its ranges listed, and any other node as a replica of group 0's
// master.
func (c *testCluster) shardMasters(p *proc, table slots.Table) ([]string, string) {
	ctx := context.Background()
	r := c.probe(p)
	defer r.Close()
	got, err := r.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Sprintf("%s: CLUSTER SLOTS: %v", p.ID, err)
	}
	if len(got) != table.Groups() {
		return nil, fmt.Sprintf("%s: CLUSTER SLOTS has %d ranges: %+v", p.ID, len(got), got)
	}
	masters := make([]string, table.Groups())
	ids := map[string]string{} // RESP address -> id
	for g, s := range got {
		rg := table.Range(g)
		if s.Start != rg.First || s.End != rg.Last || len(s.Nodes) != len(c.nodes) {
			return nil, fmt.Sprintf("%s: CLUSTER SLOTS range %d: %+v, want %d-%d with %d nodes", p.ID, g, s, rg.First, rg.Last, len(c.nodes))
		}
		masters[g] = s.Nodes[0].Addr
		for _, n := range s.Nodes {
			if id, ok := ids[n.Addr]; ok && id != n.ID || c.byAddr(n.Addr) == nil {
				return nil, fmt.Sprintf("%s: CLUSTER SLOTS node %s %s (known id %q)", p.ID, n.Addr, n.ID, id)
			}
			ids[n.Addr] = n.ID
		}
	}
	if len(ids) != len(c.nodes) {
		return nil, fmt.Sprintf("%s: CLUSTER SLOTS names %d nodes: %v", p.ID, len(ids), ids)
	}

	info, err := r.ClusterInfo(ctx).Result()
	if err != nil || !strings.Contains(info, "cluster_state:ok\r\n") || !strings.Contains(info, "cluster_slots_ok:16384\r\n") {
		return nil, fmt.Sprintf("%s: CLUSTER INFO %q %v", p.ID, info, err)
	}

	nodes, err := r.ClusterNodes(ctx).Result()
	if err != nil || !strings.HasSuffix(nodes, "\n") {
		return nil, fmt.Sprintf("%s: CLUSTER NODES %q %v", p.ID, nodes, err)
	}
	lines := strings.Split(strings.TrimSuffix(nodes, "\n"), "\n")
	if len(lines) != len(c.nodes) {
		return nil, fmt.Sprintf("%s: CLUSTER NODES has %d lines:\n%s", p.ID, len(lines), nodes)
	}
	for _, line := range lines {
		// id ip:port@cport flags master ping-sent pong-recv config-epoch link-state slot...
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Sprintf("%s: CLUSTER NODES line %q", p.ID, line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		flags := strings.Split(f[2], ",")
		var led []string
		for g, m := range masters {
			if m == addr {
				led = append(led, strconv.Itoa(table.Range(g).First)+"-"+strconv.Itoa(table.Range(g).Last))
			}
		}
		problem := ""
		switch {
		case f[0] != ids[addr]:
			problem = "id differs from CLUSTER SLOTS' " + ids[addr]
		case slices.Contains(flags, "myself") != (addr == p.RESP):
			problem = "myself flag"
		case len(led) > 0 && (!slices.Contains(flags, "master") || f[3] != "-"):
			problem = "a group leader not flagged master with - as its master"
		case len(led) == 0 && (!slices.Contains(flags, "slave") || f[3] != ids[masters[0]]):
			problem = "a node leading no group not a replica of group 0's leader"
		case !slices.Equal(f[8:], led):
			problem = fmt.Sprintf("slots %v, want %v", f[8:], led)
		}
		if problem != "" {
			return nil, fmt.Sprintf("%s: CLUSTER NODES line %q: %s", p.ID, line, problem)
		}
	}
	return masters, ""
}

// raftStatus returns node p's RAFT.STATUS of group g as a map.
func (c *testCluster) raftStatus(p *proc, g int) (map[string]string, error) {
	r := c.probe(p)
	defer r.Close()
	st, err := r.Do(context.Background(), "RAFT.STATUS", g).StringSlice()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for i := 0; i+1 < len(st); i += 2 {
		m[st[i]] = st[i+1]
	}
	return m, nil
}

// waitShards polls the given nodes until each one's view of the cluster
// (shardMasters) is sound and want accepts its masters, and returns the
// masters: want returns "" to accept.
func (c *testCluster) waitShards(nodes []*proc, timeout time.Duration, want func(masters []string) string) []string {
	c.t.Helper()
	table := shardTable(c.t)
	var masters []string
	c.settle(timeout, 100*time.Millisecond, "the sharded cluster", func() string {
		for _, p := range nodes {
			var problem string
			if masters, problem = c.shardMasters(p, table); problem != "" {
				return problem
			}
			if problem = want(masters); problem != "" {
				return p.ID + ": " + problem
			}
		}
		return ""
	})
	return masters
}

// waitBalanced polls until every node (all must run) reports every group
// led by its preferred node, both in the cluster commands and in RAFT.STATUS
// of each group (leader and its address), so that each node leads one
// group.
func (c *testCluster) waitBalanced(timeout time.Duration) {
	c.t.Helper()
	start := time.Now()
	balanced := func(masters []string) string {
		for g, m := range masters {
			if want := c.preferred(g); m != want.RESP {
				return fmt.Sprintf("group %d mastered by %s, want %s (%s)", g, m, want.RESP, want.ID)
			}
		}
		for _, p := range c.nodes {
			for g := range masters {
				// leader_addr: the group's own log has told the node
				// its leader's address (until then a node with
				// --redirect forwards instead of answering MOVED).
				st, err := c.raftStatus(p, g)
				if want := c.preferred(g); err != nil || st["leader_id"] != want.ID || st["leader_addr"] != want.RESP || st["group"] != strconv.Itoa(g) {
					return fmt.Sprintf("%s: RAFT.STATUS %d: %v %v, want leader %s at %s", p.ID, g, st, err, want.ID, want.RESP)
				}
			}
		}
		return ""
	}
	c.waitShards(c.nodes, timeout, balanced)
	c.t.Logf("leaders balanced after %s", time.Since(start).Round(time.Millisecond))
}

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

// doer is what go-redis's clients, plain and cluster, have in common for
// these tests.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// probe returns a client of node p for one look at it, which the caller
// closes (c.client's stay open until the test ends: too many for a loop
// that polls).
func (c *testCluster) probe(p *proc) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: p.RESP, Protocol: 2, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second, PoolSize: 1})
}

// clusterID is the Redis Cluster node id of node p, as CLUSTER MYID on it
// replies.
func (c *testCluster) clusterID(p *proc) string {
	r := c.probe(p)
	defer r.Close()
	id, _ := r.Do(context.Background(), "CLUSTER", "MYID").Text()
	return id
}

// callOutcome is what one RL.TOKEN call tells of its charge.
type callOutcome int

const (
	outAdmitted   callOutcome = iota // acknowledged admission
	outDenied                        // acknowledged denial
	outNotApplied                    // an error that says the call changed nothing
	outUncertain                     // it may have been applied
)

// classify reads a call's reply. An error reply means "not applied"
// unless it says UNCERTAIN (CLUSTERDOWN, LOADING, ...: certainly not
// applied); a failure to connect or to get a connection means the call was
// never sent; any other transport failure (the node died with the call in
// flight) may have applied it.
func classify(res []int64, err error) callOutcome {
	var rerr redis.Error
	var op *net.OpError
	switch {
	case err == nil && len(res) == 5 && res[0] == 1:
		return outAdmitted
	case err == nil && len(res) == 5:
		return outDenied
	case err == nil:
		return outUncertain // a malformed reply: counted against nothing
	case errors.As(err, &rerr):
		if strings.HasPrefix(err.Error(), "UNCERTAIN") {
			return outUncertain
		}
		return outNotApplied
	case errors.As(err, &op) && op.Op == "dial",
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed):
		return outNotApplied
	}
	return outUncertain
}

// limitTally counts the outcomes of the calls on one limit.
type limitTally struct {
	admitted, uncertain int
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
	var (
		mu      sync.Mutex
		tallies = map[string]*limitTally{}
		errs    = map[string]int{} // error texts, for the log
	)
	var next, decided [shardCount]atomic.Int64
	var lastOK [shardCount]atomic.Int64 // unix ns of each group's last acknowledged decision
	stop := make(chan struct{})
	var wg sync.WaitGroup
	load := func(do func(key string) ([]int64, error)) {
		defer wg.Done()
		for {
			for g := range shardCount {
				select {
				case <-stop:
					return
				default:
				}
				key := limitKey(g, next[g].Add(1)/callsPerLimit)
				res, err := do(key)
				out := classify(res, err)
				mu.Lock()
				tl := tallies[key]
				if tl == nil {
					tl = &limitTally{}
					tallies[key] = tl
				}
				switch out {
				case outAdmitted:
					tl.admitted++
				case outUncertain:
					tl.uncertain++
				}
				if err != nil {
					errs[err.Error()]++
				}
				mu.Unlock()
				if out == outAdmitted || out == outDenied {
					decided[g].Add(1)
					lastOK[g].Store(time.Now().UnixNano())
				} else {
					time.Sleep(10 * time.Millisecond) // a failing node: don't spin
				}
			}
		}
	}
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
			wg.Add(1)
			go load(func(key string) ([]int64, error) {
				return cl.Do(ctx, "RL.TOKEN", key, limit, "1/d").Int64Slice()
			})
		}
	}
	stopped := false
	stopLoad := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopLoad()
	// waitDecided polls until every group has n more decisions than at
	// the call, since the instant since (unix ns).
	waitDecided := func(what string, n int64, since int64, timeout time.Duration) {
		t.Helper()
		var base [shardCount]int64
		for g := range base {
			base[g] = decided[g].Load()
		}
		g := 0 // groups below g have decided
		c.settle(timeout, 20*time.Millisecond, what, func() string {
			for ; g < shardCount; g++ {
				if decided[g].Load() < base[g]+n || lastOK[g].Load() <= since {
					return fmt.Sprintf("group %d decided %d calls in %s", g, decided[g].Load()-base[g], timeout)
				}
			}
			return ""
		})
	}
	waitDecided("before the kill", 100, 0, 30*time.Second)

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
			if lastOK[g].Load() <= killed.UnixNano() {
				return fmt.Sprintf("group %d, led by %s, not served for 10s after %s was killed", g, c.preferred(g).ID, victim.ID)
			}
			return ""
		})
		t.Logf("group %d served %s after the kill", g, time.Duration(lastOK[g].Load()-killed.UnixNano()).Round(time.Millisecond))
	}
	// Group 1 elects a leader among the survivors, which say so, and
	// serves again.
	c.waitShards(alive, 30*time.Second, func(masters []string) string {
		if masters[1] == victim.RESP {
			return "group 1 still mastered by the killed node"
		}
		return ""
	})
	waitDecided("after the kill", 50, killed.UnixNano(), 30*time.Second)
	t.Logf("group 1 served %s after the kill", time.Duration(lastOK[1].Load()-killed.UnixNano()).Round(time.Millisecond))

	// The victim restarts on its data dir, under load; leaderships
	// move back into balance, and every group serves.
	c.start(victim)
	c.waitServing(victim)
	c.waitBalanced(60 * time.Second)
	waitDecided("after the rebalance", 50, time.Now().UnixNano(), 30*time.Second)
	stopLoad()

	// Spend every limit touched, through a node that leads its group
	// (nothing is failing now: every call must get a decision).
	direct := make([]*redis.Client, shardCount)
	for g := range direct {
		direct[g] = c.client(c.preferred(g))
	}
	exact, total, uncertain := 0, 0, 0
	for key, tl := range tallies {
		g := table.Group(slots.Of([]byte(key)))
		for {
			res, err := direct[g].Do(ctx, "RL.TOKEN", key, limit, "1/d").Int64Slice()
			if err != nil || len(res) != 5 {
				t.Fatalf("spending %s: %v %v", key, res, err)
			}
			if res[0] == 0 {
				break
			}
			tl.admitted++
		}
		total++
		uncertain += tl.uncertain
		if tl.admitted > limit {
			t.Errorf("limit %s of %d admitted %d acknowledged calls", key, limit, tl.admitted)
		}
		if tl.admitted+tl.uncertain < limit {
			t.Errorf("limit %s of %d is spent after %d acknowledged admissions and %d uncertain calls: a charge was hidden", key, limit, tl.admitted, tl.uncertain)
		}
		if tl.admitted == limit {
			exact++
		}
	}
	var decisions int64
	for g := range decided {
		decisions += decided[g].Load()
	}
	t.Logf("%d decisions on %d limits, %d uncertain calls; %d limits admitted exactly %d acknowledged calls; errors: %v",
		decisions, total, uncertain, exact, limit, errs)
}

// stop sends SIGTERM and waits for a clean exit.
func (c *testCluster) stop(p *proc) {
	c.t.Helper()
	run := p.Process()
	if run == nil {
		return
	}
	err := c.Stop(p, 30*time.Second)
	if err == nil {
		err = run.Err()
	}
	if err != nil {
		c.dumpLogs()
		c.t.Fatalf("stopping %s: %v", p.ID, err)
	}
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
	var stdout, stderr bytes.Buffer
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, binary, nd.Args(c.Peers, "--log-level", "warn")...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 || cctx.Err() != nil {
		t.Fatalf("--shards 2 on a 3-shard data dir: %v (want a non-zero exit)\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if msg := stderr.String(); !strings.Contains(msg, "--shards 3") || !strings.Contains(msg, "--shards 2") {
		t.Fatalf("--shards 2 on a 3-shard data dir: the error names not both counts:\n%s", msg)
	}
	// The refusal changed nothing: with its own count the node serves its
	// data again.
	c.start(p)
	c.waitServing(p)
	peekAll("after the refused start", after)
}
