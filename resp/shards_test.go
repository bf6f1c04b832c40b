package resp

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/internal/servetest"
	"github.com/sluice-rl/sluice/internal/slots"
)

// threeGroups is a healthy cluster of three nodes and three Raft groups,
// each led by another node, seen from n2.
var threeGroups = slots.Topology{
	Self:  "n2",
	Epoch: 9,
	Nodes: threeNodes.Nodes,
	Groups: []slots.Group{
		{Range: slots.Range{First: 0, Last: 5461}, Leader: "n1"},
		{Range: slots.Range{First: 5462, Last: 10922}, Leader: "n2"},
		{Range: slots.Range{First: 10923, Last: 16383}, Leader: "n3"},
	},
}

// downGroup is a fakeCluster whose Execute fails the operations of one
// group with a group-level error, as cluster.Host does when that group's
// batch fails and the others run.
type downGroup struct {
	*fakeCluster
	table slots.Table
	mu    sync.Mutex
	down  int // the failing group, -1: none
	err   error
}

func (d *downGroup) Execute(ctx context.Context, ops []engine.Op, results []engine.Result) error {
	d.mu.Lock()
	down, derr := d.down, d.err
	d.mu.Unlock()
	if err := d.fakeCluster.Execute(ctx, ops, results); err != nil {
		return err
	}
	for i := range ops {
		// A keyless DBSIZE runs in every group, the failing one too.
		if down >= 0 && ops[i].Code == engine.OpCount || len(ops[i].Key) > 0 && d.table.Group(slots.Of(ops[i].Key)) == down {
			results[i] = engine.Result{Err: derr}
		}
	}
	return nil
}

func startThreeGroups(t *testing.T, cfg Config) (*downGroup, string) {
	t.Helper()
	eng := engine.New(engine.Config{Stripes: 16})
	cfg.Engine = eng
	table, _ := slots.Even(3)
	d := &downGroup{fakeCluster: &fakeCluster{LocalExecutor: NewLocalExecutor(eng, nil)}, table: table, down: -1}
	d.set(threeGroups, "", true)
	srv := NewServer(cfg, d)
	return d, servetest.Start(t, srv)
}

// TestOneGroupFailingFailsOnlyItsCommands: in one pipeline, the commands
// of a group whose batch failed reply that group's error (CLUSTERDOWN:
// not applied; UNCERTAIN: may have been), every other command its own
// reply.
func TestOneGroupFailingFailsOnlyItsCommands(t *testing.T) {
	d, addr := startThreeGroups(t, Config{Cluster: true})
	c := rawDial(t, addr)
	// bar is in group 0 (slot 5061), foo in group 2 (slot 12182).
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&errcode.Error{Code: errcode.ClusterDown}, "-CLUSTERDOWN"},
		{&errcode.Error{Code: errcode.CommitTimeout, Num: 2e9}, "-UNCERTAIN"},
	} {
		d.mu.Lock()
		d.down, d.err = 2, tc.err
		d.mu.Unlock()
		c.send(t, encode("RL.TOKEN", "bar", "10", "1/h")+encode("RL.TOKEN", "foo", "10", "1/h")+encode("EXISTS", "foo")+encode("DBSIZE")+encode("PTTL", "bar"))
		if got := string(c.read(t)); !strings.HasPrefix(got, "*5 [:1 :10") {
			t.Fatalf("group 0's RL.TOKEN: %s", got)
		}
		for _, cmd := range []string{"RL.TOKEN foo", "EXISTS foo", "DBSIZE"} {
			if got := string(c.read(t)); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("%s in the failing group: %s, want %s...", cmd, got, tc.want)
			}
		}
		if got := string(c.read(t)); !strings.HasPrefix(got, ":") || got == ":-2" {
			t.Fatalf("group 0's PTTL: %s", got)
		}
	}
}

// TestMultiStaysInOneGroup: with several groups, a transaction's keyed
// commands must all be in the first one's group, as Redis Cluster keeps a
// transaction in one slot: another group's command is refused with
// CROSSSLOT and EXEC aborts; keyless commands may join.
func TestMultiStaysInOneGroup(t *testing.T) {
	_, addr := startThreeGroups(t, Config{Cluster: true})
	c := rawDial(t, addr)
	c.do(t, "MULTI").expect(t, "+OK")
	c.do(t, "RL.TOKEN", "bar", "10", "1/s").expect(t, "+QUEUED")
	c.do(t, "RL.TOKEN", "hello", "10", "1/s").expect(t, "+QUEUED") // group 0 too (slot 866)
	c.do(t, "PING").expect(t, "+QUEUED")
	c.do(t, "RL.TOKEN", "foo", "10", "1/s").expect(t, "-CROSSSLOT Keys in request don't hash to the same slot")
	c.do(t, "EXEC").expect(t, "-EXECABORT Transaction discarded because of previous errors.")

	c.do(t, "MULTI").expect(t, "+OK")
	c.do(t, "RL.TOKEN", "foo", "10", "1/s").expect(t, "+QUEUED")
	c.do(t, "DBSIZE").expect(t, "+QUEUED")
	if got := string(c.do(t, "EXEC")); !strings.HasPrefix(got, "*2 [*5 [:1 :10 :9") {
		t.Fatalf("EXEC in one group: %s", got)
	}
}

// TestRaftStatusGroups: RAFT.STATUS names a group (0 by default) and
// refuses one the node does not run; INFO raft lists every group.
func TestRaftStatusGroups(t *testing.T) {
	_, addr := startThreeGroups(t, Config{Cluster: true})
	c := rawDial(t, addr)
	c.do(t, "RAFT.STATUS").expect(t, "*2 [$2 id $2 n2]")
	c.do(t, "RAFT.STATUS", "2").expect(t, "*2 [$2 id $2 n2]")
	for _, bad := range []string{"3", "-1", "x"} {
		if got := string(c.do(t, "RAFT.STATUS", bad)); !strings.HasPrefix(got, "-ERR invalid group '"+bad+"'") {
			t.Errorf("RAFT.STATUS %s: %s", bad, got)
		}
	}
	c.do(t, "RAFT.STATUS", "1", "2").expect(t, "-ERR syntax error")
	c.do(t, "RAFT.TRANSFER", "n1", "GROUP", "2").expect(t, "+OK")
	if got := string(c.do(t, "RAFT.TRANSFER", "n1", "GROUP", "7")); !strings.HasPrefix(got, "-ERR invalid group '7'") {
		t.Errorf("RAFT.TRANSFER to a group the node does not run: %s", got)
	}
	info := string(c.do(t, "INFO", "raft"))
	for _, want := range []string{"raft_groups:3", "raft_group0:", "raft_group2:"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO raft lacks %q:\n%s", want, info)
		}
	}
}

// TestMGetCrossSlot: MGET names several keys, which must be in one group:
// keys of two groups reply CROSSSLOT, keys of one group (a hash tag) their
// values.
func TestMGetCrossSlot(t *testing.T) {
	_, addr := startThreeGroups(t, Config{Cluster: true})
	c := rawDial(t, addr)
	c.do(t, "SET", "bar", "1").expect(t, "+OK") // group 0 (slot 5061)
	c.do(t, "SET", "{bar}x", "2").expect(t, "+OK")
	c.do(t, "MGET", "bar", "foo").expect(t, "-"+msgCrossSlot.Text()) // foo: group 2
	c.do(t, "MGET", "bar", "{bar}x", "{bar}y").expect(t, "*3 [$1 1 $1 2 $-1]")
}
