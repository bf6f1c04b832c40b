package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/internal/slots"
	"github.com/sluice-rl/sluice/internal/testcerts"
	"github.com/sluice-rl/sluice/internal/testkit/memnet"
	"github.com/sluice-rl/sluice/persistence"
)

// newTestHosts starts n hosts with shards groups each over the in-memory
// network (in memory unless opt sets a DataDir) and waits until every
// group of every host serves.
func newTestHosts(t *testing.T, n, shards int, opt func(i int, c *Config)) *testHosts {
	t.Helper()
	return startHosts(t, n, hostsOpt{shards: shards, config: hostTiming(opt)})
}

// hostTiming is opt after the timing the tests of several groups were
// written for: elections a little slower than fastRaft's, so that three
// hosts of several groups each do not flap on a busy machine.
func hostTiming(opt func(i int, c *Config)) func(i int, c *Config) {
	return func(i int, c *Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
		c.ClusterTimeout = 2 * time.Second
		if opt != nil {
			opt(i, c)
		}
	}
}

// leaders returns each group's leader as host index (-1: none).
func (th *testHosts) leaders() []int {
	out := make([]int, th.shards)
	for g := range out {
		out[g] = -1
		for i, h := range th.hosts {
			if h != nil && h.nodes[g].raft.State() == raft.Leader {
				out[g] = i
			}
		}
	}
	return out
}

// waitBalanced waits until every group has a leader, group g on host g
// mod hosts (the preferred member: IDs n1, n2, ... sort as the hosts).
func (th *testHosts) waitBalanced(timeout time.Duration) {
	th.t.Helper()
	waitFor(th.t, timeout, func() error {
		got := th.leaders()
		for g, i := range got {
			if i != g%len(th.hosts) {
				return fmt.Errorf("group leaders (host index per group) %v, want group g on host g mod %d", got, len(th.hosts))
			}
		}
		return nil
	})
}

// keyIn returns a key of the form prefix+n that hashes to group g.
func keyIn(t testing.TB, table slots.Table, g int, prefix string) string {
	for n := 0; n < 100000; n++ {
		k := fmt.Sprintf("%s%d", prefix, n)
		if table.Group(slots.Of([]byte(k))) == g {
			return k
		}
	}
	t.Fatalf("no key %s* in group %d", prefix, g)
	return ""
}

func hostExec(t testing.TB, h *Host, ops ...engine.Op) []engine.Result {
	t.Helper()
	res := make([]engine.Result, len(ops))
	if err := h.Execute(context.Background(), ops, res); err != nil {
		t.Fatalf("host %s: Execute: %v", h.cfg.ID, err)
	}
	return res
}

// TestHostGroupsBalanceAndRoute: three hosts of three groups each: every
// group gets its own leader, on its preferred host; a batch whose keys
// span the groups, sent to any host, runs each key in its group (the
// state lands in that group's engine, on every replica); DBSIZE, KEYS,
// SCAN and FLUSHALL cover every group; the topology lists each range with
// its leader.
func TestHostGroupsBalanceAndRoute(t *testing.T) {
	const shards = 3
	th := newTestHosts(t, 3, shards, nil)
	th.waitBalanced(20 * time.Second)
	table, _ := slots.Even(shards)
	rule := engine.Rule{Kind: engine.KindToken, Limit: 5, Period: int64(time.Second)}

	var keys []string
	for g := range shards {
		for j := range 2 {
			keys = append(keys, keyIn(t, table, g, fmt.Sprintf("user:%d:%d:", g, j)))
		}
	}
	for from, h := range th.hosts {
		var ops []engine.Op
		for _, k := range keys {
			ops = append(ops, decide(k, rule, 1))
		}
		res := hostExec(t, h, ops...)
		for i, r := range res {
			if r.Err != nil || !r.Allowed || r.Remaining != int64(5-from-1) {
				t.Fatalf("from host %d, key %s: %+v, want allowed with %d left", from+1, keys[i], r, 5-from-1)
			}
		}
	}
	// Every key's state is in its own group's engine, on every host.
	waitFor(t, 5*time.Second, func() error {
		for i, engs := range th.engines {
			for g, e := range engs {
				if e.Len() != 2 {
					return fmt.Errorf("host %d group %d holds %d keys, want 2", i+1, g, e.Len())
				}
			}
		}
		return nil
	})

	h := th.hosts[1]
	if r := hostExec(t, h, engine.Op{Code: engine.OpCount}); r[0].Count != int64(len(keys)) {
		t.Fatalf("DBSIZE over the groups: %d, want %d", r[0].Count, len(keys))
	}
	r := hostExec(t, h, engine.Op{Code: engine.OpKeys})
	var got []string
	for _, k := range r[0].Keys {
		got = append(got, string(k))
	}
	sort.Strings(got)
	want := slices.Sorted(slices.Values(keys))
	if !slices.Equal(got, want) {
		t.Fatalf("KEYS over the groups: %q, want %q", got, want)
	}
	// SCAN, one key per step: its cursor walks the groups in turn.
	var scanned []string
	cursor, steps := uint64(0), 0
	for {
		r := hostExec(t, h, engine.Op{Code: engine.OpScan, Cursor: cursor, Count: 1})
		for _, k := range r[0].Keys {
			scanned = append(scanned, string(k))
		}
		cursor = r[0].Cursor
		if steps++; cursor == 0 || steps > 100 {
			break
		}
	}
	sort.Strings(scanned)
	if !slices.Equal(scanned, want) {
		t.Fatalf("SCAN over the groups: %q, want %q", scanned, want)
	}

	top := h.Topology()
	if len(top.Groups) != shards || len(top.Nodes) != 3 {
		t.Fatalf("topology: %+v", top)
	}
	for g, grp := range top.Groups {
		if grp.Range != table.Range(g) || grp.Leader != fmt.Sprintf("n%d", g+1) {
			t.Errorf("topology group %d: %+v, want range %+v led by n%d", g, grp, table.Range(g), g+1)
		}
	}
	for g := range shards {
		if _, local := th.hosts[g].Route(g); !local {
			t.Errorf("host %d does not route group %d locally though it leads it", g+1, g)
		}
		if addr, local := th.hosts[(g+1)%3].Route(g); local || addr != th.cfgs[g].RESPAddr {
			t.Errorf("host %d routes group %d to %q (local %v), want its leader's %s", (g+1)%3+1, g, addr, local, th.cfgs[g].RESPAddr)
		}
	}

	if r := hostExec(t, th.hosts[2], engine.Op{Code: engine.OpFlush}); r[0].Count != int64(len(keys)) {
		t.Fatalf("FLUSHALL over the groups forgot %d keys, want %d", r[0].Count, len(keys))
	}
	if r := hostExec(t, h, engine.Op{Code: engine.OpCount}); r[0].Count != 0 {
		t.Fatalf("DBSIZE after FLUSHALL: %d", r[0].Count)
	}
}

// TestHostSharedLimitExactAcrossGroups: clients on every host take from
// limits in every group at once: each limit admits exactly its capacity.
func TestHostSharedLimitExactAcrossGroups(t *testing.T) {
	const shards, limit = 3, 40
	th := newTestHosts(t, 3, shards, nil)
	table, _ := slots.Even(shards)
	rule := engine.Rule{Kind: engine.KindToken, Limit: limit, Period: int64(time.Hour)}
	keys := []string{keyIn(t, table, 0, "shared:"), keyIn(t, table, 1, "shared:"), keyIn(t, table, 2, "shared:")}
	admitted := make([]atomic.Int64, len(keys))
	var wg sync.WaitGroup
	for _, h := range th.hosts {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 2 * limit / 3 {
					ops := []engine.Op{decide(keys[0], rule, 1), decide(keys[1], rule, 1), decide(keys[2], rule, 1)}
					res := make([]engine.Result, len(ops))
					if err := h.Execute(context.Background(), ops, res); err != nil {
						t.Errorf("Execute: %v", err)
						return
					}
					for i, r := range res {
						if r.Err != nil {
							t.Errorf("key %s: %v", keys[i], r.Err)
						} else if r.Allowed {
							admitted[i].Add(1)
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	for i := range keys {
		if got := admitted[i].Load(); got != limit {
			t.Errorf("key %s (group %d) admitted %d, want exactly %d", keys[i], i, got, limit)
		}
	}
}

// TestHostRebalancesAfterFailover: a host that led a group stops; the
// others take its group over and serve it; when it comes back (from its
// data dir) and has caught up, the group moves back to it, and nothing
// it acknowledged is lost.
func TestHostRebalancesAfterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a host")
	}
	const shards = 3
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	th := newTestHosts(t, 3, shards, func(i int, c *Config) {
		c.InMemory = false
		c.DataDir = dirs[i]
		c.LogStore = "wal"
		c.Fsync = "no"
	})
	th.waitBalanced(20 * time.Second)
	table, _ := slots.Even(shards)
	rule := engine.Rule{Kind: engine.KindToken, Limit: 10, Period: int64(time.Hour)}
	key := keyIn(t, table, 1, "k:")
	for range 3 {
		hostExec(t, th.hosts[0], decide(key, rule, 1))
	}
	th.stop(1) // group 1's leader
	waitFor(t, 20*time.Second, func() error {
		if l := th.leaders()[1]; l < 0 {
			return errors.New("group 1 has no leader yet")
		}
		return nil
	})
	res := make([]engine.Result, 1)
	waitFor(t, 20*time.Second, func() error {
		return th.hosts[2].Execute(context.Background(), []engine.Op{decide(key, rule, 1)}, res)
	})
	if res[0].Remaining != 6 {
		t.Fatalf("after the failover the key has %d left, want 6 (4 taken)", res[0].Remaining)
	}
	th.start(1)
	th.waitBalanced(30 * time.Second)
	r := hostExec(t, th.hosts[1], decide(key, rule, 1))
	if r[0].Remaining != 5 {
		t.Fatalf("after the rebalance the key has %d left, want 5 (5 taken)", r[0].Remaining)
	}
}

// TestHostRefusesAnotherShardCount: a data dir made with 3 groups refuses
// a start with 2, naming both, and starts again with 3.
func TestHostRefusesAnotherShardCount(t *testing.T) {
	dir := t.TempDir()
	if err := persistence.ClaimShards(dir, 3); err != nil {
		t.Fatal(err)
	}
	cfg := Config{ID: "n1", RaftAddr: "127.0.0.1:7001", RESPAddr: "127.0.0.1:6001", ForwardAddr: "127.0.0.1:0",
		DataDir: dir, Logger: testLogger(t), Network: memnet.NewInmem().Node("n1")}
	fastRaft(&cfg)
	_, err := NewHost(context.Background(), cfg, []*engine.Engine{engine.New(engine.Config{}), engine.New(engine.Config{})})
	var mismatch *persistence.ShardMismatchError
	if !errors.As(err, &mismatch) || mismatch.Has != 3 || mismatch.Want != 2 {
		t.Fatalf("NewHost with 2 shards on a 3-shard data dir: %v", err)
	}
	if !strings.Contains(err.Error(), "--shards 3") || !strings.Contains(err.Error(), "--shards 2") {
		t.Errorf("the error does not name both counts: %v", err)
	}
}

// TestMergeResult: how the results of an operation run in every group
// combine, and that a write failed in some group only is UNCERTAIN.
func TestMergeResult(t *testing.T) {
	down := &errcode.Error{Code: errcode.ClusterDown}
	uncertain := &errcode.Error{Code: errcode.CommitTimeout}
	tests := []struct {
		name    string
		code    engine.OpCode
		acc, r  engine.Result
		count   int64
		keys    int
		errCode errcode.Code
		wantErr bool
	}{
		{name: "dbsize adds up", code: engine.OpCount, acc: engine.Result{Count: 3}, r: engine.Result{Count: 4}, count: 7},
		{name: "flushall adds up", code: engine.OpFlush, acc: engine.Result{Count: 1}, r: engine.Result{Count: 2}, count: 3},
		{name: "keys concatenate", code: engine.OpKeys, acc: engine.Result{Keys: [][]byte{[]byte("a")}}, r: engine.Result{Keys: [][]byte{[]byte("b"), []byte("c")}}, keys: 3},
		{name: "read failing in one group fails", code: engine.OpCount, acc: engine.Result{Count: 3}, r: engine.Result{Err: down}, wantErr: true, errCode: errcode.ClusterDown},
		{name: "write applied in one group only is uncertain", code: engine.OpFlush, acc: engine.Result{Count: 3}, r: engine.Result{Err: down}, wantErr: true, errCode: errcode.Uncertain},
		{name: "write failed everywhere, not applied", code: engine.OpFlush, acc: engine.Result{Err: down}, r: engine.Result{Err: down}, wantErr: true, errCode: errcode.ClusterDown},
		{name: "write failed, one maybe applied", code: engine.OpTimeWarp, acc: engine.Result{Err: down}, r: engine.Result{Err: uncertain}, wantErr: true, errCode: errcode.Uncertain},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			acc := tc.acc
			mergeResult(tc.code, &acc, &tc.r)
			if tc.wantErr {
				if e := errcode.Of(acc.Err); e == nil || e.Code != tc.errCode {
					t.Fatalf("error %v, want code %v", acc.Err, tc.errCode)
				}
				return
			}
			if acc.Err != nil || acc.Count != tc.count || len(acc.Keys) != tc.keys {
				t.Fatalf("merged %+v, want count %d, %d keys", acc, tc.count, tc.keys)
			}
		})
	}
}

// TestScanCursorCarriesTheGroup: a SCAN cursor names the group above the
// engine's own cursor, and a group's end moves on to the next group.
func TestScanCursorCarriesTheGroup(t *testing.T) {
	tests := []struct {
		g, groups int
		c, want   uint64
	}{
		{0, 3, 5<<32 | 7, 5<<32 | 7},
		{1, 3, 9, 1<<scanGroupShift | 9},
		{0, 3, 0, 1 << scanGroupShift},
		{1, 3, 0, 2 << scanGroupShift},
		{2, 3, 0, 0},
	}
	for _, tc := range tests {
		if got := scanCursor(tc.g, tc.groups, tc.c); got != tc.want {
			t.Errorf("scanCursor(%d, %d, %#x) = %#x, want %#x", tc.g, tc.groups, tc.c, got, tc.want)
		}
	}
}

// TestHostMembershipWithShards replaces a dead member of a cluster of
// two groups: removing a live member while one is down is refused (it
// would cost a group its majority), a join with an unreachable address is
// refused, a new node started without bootstrapping is joined (sent to
// another member, which forwards each group's step to that group's
// leader) and becomes a voter of every group, and the dead member is
// removed from every group. It runs over plain TCP and over mutual TLS
// (every step forwarded, every progress question, with the cluster's
// certificates).
func TestHostMembershipWithShards(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", secure), func(t *testing.T) { testHostMembershipWithShards(t, secure) })
	}
}

func testHostMembershipWithShards(t *testing.T, secure bool) {
	var opt func(i int, c *Config)
	if secure {
		certs := testcerts.Generate(t, t.TempDir())
		peerTLS, err := PeerTLSConfig(certs.Cert, certs.Key, certs.CA)
		if err != nil {
			t.Fatal(err)
		}
		opt = func(_ int, c *Config) { c.TLS = peerTLS }
	}
	th := startHosts(t, 3, hostsOpt{shards: 2, tcp: true, config: hostTiming(opt)})
	ctx := context.Background()
	th.stop(2) // n3 dies
	err := th.hosts[0].Remove(ctx, "n2")
	if e := errcode.Of(err); e == nil || e.Code != errcode.RemoveUnsafe || e.Detail != "n2" {
		t.Fatalf("removing a live member while another is down: %v, want it refused", err)
	}
	if err := th.hosts[1].Remove(ctx, "n9"); !errcode.Is(err, errcode.NoSuchNode) {
		t.Fatalf("removing an unknown node: %v", err)
	}
	dead, deadLn := reserveAddr(t) // a port that accepts nothing once closed
	deadLn.Close()
	if err := th.hosts[1].Join(ctx, "n4", dead); !errcode.Is(err, errcode.BadRaftAddr) {
		t.Fatalf("join at an address nothing listens on: %v", err)
	}

	// n4 starts empty and waits to be joined.
	c := th.cfgs[0]
	c.ID, c.Peers, c.NoBootstrap = "n4", nil, true
	var held [2]net.Listener
	c.RaftAddr, held[0] = reserveAddr(t)
	c.ForwardAddr, held[1] = reserveAddr(t)
	c.RESPAddr = "127.0.0.1:6004"
	c.Logger = testLogger(t).With("test_node", 4)
	held[0].Close()
	held[1].Close()
	th.cfgs = append(th.cfgs, c)
	th.hosts = append(th.hosts, nil)
	th.engines = append(th.engines, nil)
	th.start(3)
	// n4 knows no leader yet: a join sent to it fails after an election's
	// time, naming the group, and changes nothing.
	if err := th.hosts[3].Join(ctx, "n4", c.RaftAddr); !errcode.Is(err, errcode.GroupAdminFailed) || !strings.Contains(err.Error(), "no leader") {
		t.Fatalf("join sent to a node that knows no leader: %v", err)
	}
	// A join interrupted after its first step in group 1 (n4 a non-voter
	// there) is resumed by the command sent again.
	l1 := th.leaders()[1]
	if err := th.hosts[l1].nodes[1].raft.AddNonvoter("n4", raft.ServerAddress(c.RaftAddr), 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if st := statusMap(th.hosts[l1].Status(1)); st["nonvoters"] != "n4" || !strings.Contains(st["members"], "n4="+c.RaftAddr+"(nonvoter)") {
		t.Fatalf("group 1 with n4 a non-voter: %v", st)
	}
	for _, sent := range []int{1, 0} { // the second time: nothing to do
		if err := th.hosts[sent].Join(ctx, "n4", c.RaftAddr); err != nil {
			t.Fatalf("join n4 (sent to n%d): %v", sent+1, err)
		}
	}
	for g := range th.shards {
		st := statusMap(th.hosts[0].Status(g))
		if st["voters"] != "n1,n2,n3,n4" || st["nonvoters"] != "" {
			t.Fatalf("group %d after the join: voters %q nonvoters %q", g, st["voters"], st["nonvoters"])
		}
	}
	if err := th.hosts[3].Remove(ctx, "n3"); err != nil {
		t.Fatalf("remove the dead n3 (sent to n4): %v", err)
	}
	for g := range th.shards {
		waitFor(t, 5*time.Second, func() error {
			for _, i := range []int{0, 1, 3} {
				st := statusMap(th.hosts[i].Status(g))
				if st["voters"] != "n1,n2,n4" {
					return fmt.Errorf("group %d on n%d: voters %q", g, i+1, st["voters"])
				}
			}
			return nil
		})
	}
	// Every group serves through the new member.
	for g := range th.shards {
		waitFor(t, 10*time.Second, func() error {
			key := fmt.Sprintf("k%d", g)
			for th.hosts[3].table.Group(slots.Of([]byte(key))) != g {
				key += "x"
			}
			return th.hosts[3].Execute(ctx, []engine.Op{decide(key, tokenRule, 1)}, make([]engine.Result, 1))
		})
	}
	// A node asked to remove itself does (it hands over the groups it
	// leads first).
	if err := th.hosts[1].Remove(ctx, "n2"); err != nil {
		t.Fatalf("n2 removing itself: %v", err)
	}
	for g := range th.shards {
		waitFor(t, 5*time.Second, func() error {
			for _, i := range []int{0, 3} {
				if st := statusMap(th.hosts[i].Status(g)); st["voters"] != "n1,n4" {
					return fmt.Errorf("group %d on n%d: voters %q", g, i+1, st["voters"])
				}
			}
			return nil
		})
	}
}

// TestHostMetricsPerGroup: with several groups, every Raft metric carries
// the group as a label (one registry takes them all without a clash); with
// one group the metrics are the node's, unlabelled.
func TestHostMetricsPerGroup(t *testing.T) {
	for _, shards := range []int{1, 2} {
		th := newTestHosts(t, 1, shards, nil)
		reg := prometheus.NewPedanticRegistry()
		if err := reg.Register(th.hosts[0].Collector()); err != nil {
			t.Fatalf("%d groups: register: %v", shards, err)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("%d groups: gather: %v", shards, err)
		}
		groups := map[string]bool{}
		for _, mf := range mfs {
			if mf.GetName() != "sluice_raft_term" {
				continue
			}
			for _, m := range mf.GetMetric() {
				g := "none"
				for _, l := range m.GetLabel() {
					if l.GetName() == "group" {
						g = l.GetValue()
					}
				}
				groups[g] = true
			}
		}
		want := map[string]bool{"none": true}
		if shards == 2 {
			want = map[string]bool{"0": true, "1": true}
		}
		if fmt.Sprint(groups) != fmt.Sprint(want) {
			t.Errorf("%d groups: sluice_raft_term series by group label %v, want %v", shards, groups, want)
		}
		th.close()
	}
}

// TestHostJoinAcrossLeaderChange: a join whose new node is not up yet
// waits in each group for it to catch up; the leadership of a group moves
// meanwhile; once the node starts, the join finishes on the new leader
// (which resumes from the configuration: the node is a non-voter there
// already) and the node votes in every group.
func TestHostJoinAcrossLeaderChange(t *testing.T) {
	th := newTestHosts(t, 3, 2, nil)
	ctx := context.Background()
	c := th.cfgs[0]
	c.ID, c.Peers, c.NoBootstrap = "n4", nil, true
	c.RaftAddr, c.ForwardAddr, c.Network = th.freeAddr(), "127.0.0.1:0", th.network("n4")
	held, err := c.Network.Listen(c.RaftAddr) // accepts (the join's reach check) but never answers
	if err != nil {
		t.Fatal(err)
	}
	c.RESPAddr = "127.0.0.1:6004"
	c.Logger = testLogger(t).With("test_node", 4)
	th.cfgs = append(th.cfgs, c)
	th.hosts = append(th.hosts, nil)
	th.engines = append(th.engines, nil)
	done := make(chan error, 1)
	go func() { done <- th.hosts[0].Join(ctx, "n4", c.RaftAddr) }()
	l1 := -1
	waitFor(t, 10*time.Second, func() error {
		l1 = th.leaders()[1]
		if l1 < 0 {
			return errors.New("group 1 has no leader")
		}
		if st := statusMap(th.hosts[l1].Status(1)); st["nonvoters"] != "n4" {
			return fmt.Errorf("group 1: nonvoters %q", st["nonvoters"])
		}
		return nil
	})
	if err := th.hosts[l1].Transfer(ctx, 1, ""); err != nil {
		t.Fatalf("transfer group 1: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("the join ended before its node started: %v", err)
	default:
	}
	held.Close()
	th.start(3)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("join: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the join did not finish")
	}
	// The join answered once every group's leader promoted n4; n4 itself
	// learns it as it applies the change.
	waitFor(t, 10*time.Second, func() error {
		for g := range th.shards {
			if st := statusMap(th.hosts[3].Status(g)); st["voters"] != "n1,n2,n3,n4" || st["nonvoters"] != "" {
				return fmt.Errorf("group %d: voters %q nonvoters %q", g, st["voters"], st["nonvoters"])
			}
		}
		return nil
	})
}
