package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/slots"
)

// The sharded test cluster of the process tests (shards_process_test.go,
// limiter_scripts_process_test.go, membership_process_test.go...): three
// nodes of shardCount Raft groups, its slot table, which node leads which
// group and waiting for the leaderships to balance; and the kill tests'
// load: what a call's reply says of its charge (classify) and what the
// load goroutines record (groupLoad), checked once every limit is spent.

// shardCount is the --shards of these tests: as many groups as nodes.
const shardCount = 3

// newShardCluster starts three nodes with --shards 3, --redirect when
// redirect is set, and extra flags (after testFlags, so they override them).
func newShardCluster(t *testing.T, redirect bool, extra ...string) *testCluster {
	t.Helper()
	return newTestClusterWith(t, 3, func(nodes []*proc) {
		for _, p := range nodes {
			p.Extra = append(p.Extra, "--shards", strconv.Itoa(shardCount))
			if redirect {
				p.Extra = append(p.Extra, "--redirect")
			}
			p.Extra = append(p.Extra, extra...)
		}
	})
}

// newBalancedShardCluster is newShardCluster, once every node serves,
// every group is led by its preferred member and runs the newest cluster
// version (so the tests may send the string commands and the rate limit
// service's, which a group refuses until then).
func newBalancedShardCluster(t *testing.T, redirect bool, extra ...string) *testCluster {
	t.Helper()
	c := newShardCluster(t, redirect, extra...)
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

// groupLoad is what the kill tests' load goroutines record, under a
// lock: each limit's outcomes (K names a limit), the errors' texts, and
// each group's acknowledged decisions and the instant (unix ns) of its
// last.
type groupLoad[K comparable] struct {
	c               *testCluster
	mu              sync.Mutex
	tallies         limitTallies[K]
	errs            map[string]int
	decided, lastOK [shardCount]atomic.Int64

	quit    chan struct{}
	wg      sync.WaitGroup
	stopped bool
}

func newGroupLoad[K comparable](c *testCluster) *groupLoad[K] {
	return &groupLoad[K]{c: c, tallies: limitTallies[K]{}, errs: map[string]int{}, quit: make(chan struct{})}
}

// start runs call over and over in a goroutine of its own until stop;
// each call makes one call and records it.
func (l *groupLoad[K]) start(call func()) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			select {
			case <-l.quit:
				return
			default:
			}
			call()
		}
	}()
}

// stop ends the goroutines start began and waits for them; it may be
// called again.
func (l *groupLoad[K]) stop() {
	if !l.stopped {
		l.stopped = true
		close(l.quit)
		l.wg.Wait()
	}
}

// record counts one call on limit k, of group g, that ended in out (and
// err); after a failure it pauses the caller briefly, so that a failing
// node is not called in a spin.
func (l *groupLoad[K]) record(k K, g int, out callOutcome, err error) {
	l.mu.Lock()
	l.tallies.count(k, out)
	if err != nil {
		l.errs[err.Error()]++
	}
	l.mu.Unlock()
	if out == outAdmitted || out == outDenied {
		l.decided[g].Add(1)
		l.lastOK[g].Store(time.Now().UnixNano())
	} else {
		time.Sleep(10 * time.Millisecond) // a failing node: don't spin
	}
}

// waitDecided polls until every group has decided n more calls than at
// the call, the last since the instant since (unix ns).
func (l *groupLoad[K]) waitDecided(what string, n int64, since int64, timeout time.Duration) {
	l.c.t.Helper()
	var base [shardCount]int64
	for g := range base {
		base[g] = l.decided[g].Load()
	}
	g := 0 // groups below g have decided
	l.c.settle(timeout, 20*time.Millisecond, what, func() string {
		for ; g < shardCount; g++ {
			if l.decided[g].Load() < base[g]+n || l.lastOK[g].Load() <= since {
				return fmt.Sprintf("group %d decided %d calls in %s", g, l.decided[g].Load()-base[g], timeout)
			}
		}
		return ""
	})
}

// decisions is the number of acknowledged decisions of every group.
func (l *groupLoad[K]) decisions() int64 {
	var n int64
	for g := range l.decided {
		n += l.decided[g].Load()
	}
	return n
}

// spendAll is the tallies' spendAll.
func (l *groupLoad[K]) spendAll(limit int, spend func(k K) (admitted bool)) (exact, uncertain int) {
	l.c.t.Helper()
	return l.tallies.spendAll(l.c.t, limit, spend)
}

// limitTallies counts each limit's outcomes (K names a limit); its user
// holds the lock.
type limitTallies[K comparable] map[K]*limitTally

// count counts one call on limit k that ended in out.
func (ts limitTallies[K]) count(k K, out callOutcome) {
	tl := ts[k]
	if tl == nil {
		tl = &limitTally{}
		ts[k] = tl
	}
	switch out {
	case outAdmitted:
		tl.admitted++
	case outUncertain:
		tl.uncertain++
	}
}

// spendAll calls spend on each limit touched until it denies (nothing
// fails by then: every call must decide), counting the admissions, and
// fails the test for a limit of limit that admitted more acknowledged
// calls, or fewer than limit counting the uncertain ones (an error reply
// that said "not applied" hid a charge). It returns how many limits
// admitted exactly limit acknowledged calls, and the uncertain calls.
func (ts limitTallies[K]) spendAll(t *testing.T, limit int, spend func(k K) (admitted bool)) (exact, uncertain int) {
	t.Helper()
	for k, tl := range ts {
		for spend(k) {
			tl.admitted++
		}
		uncertain += tl.uncertain
		if tl.admitted > limit {
			t.Errorf("limit %v of %d admitted %d acknowledged calls", k, limit, tl.admitted)
		}
		if tl.admitted+tl.uncertain < limit {
			t.Errorf("limit %v of %d is spent after %d acknowledged admissions and %d uncertain calls: a charge was hidden", k, limit, tl.admitted, tl.uncertain)
		}
		if tl.admitted == limit {
			exact++
		}
	}
	return exact, uncertain
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
