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

func startThreeGroups(t testing.TB, cfg Config) (*downGroup, string) {
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

// TestRaftStatusGroups: INFO raft lists every group (RAFT.STATUS and
// RAFT.TRANSFER's groups are in testdata/transcripts/cluster_groups.txt).
func TestRaftStatusGroups(t *testing.T) {
	_, addr := startThreeGroups(t, Config{Cluster: true})
	c := rawDial(t, addr)
	info := string(c.do(t, "INFO", "raft"))
	for _, want := range []string{"raft_groups:3", "raft_group0:", "raft_group2:"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO raft lacks %q:\n%s", want, info)
		}
	}
}

// TestWatchWhenGroupFails: a WATCH whose group failed replies the error
// and leaves the next EXEC to reply nil (the key is not watched, so the
// transaction must not run as if it were); an EXEC whose watch check
// could not run replies that one error and none of its commands' replies;
// WATCH of keys in two groups makes EXEC reply CROSSSLOT.
func TestWatchWhenGroupFails(t *testing.T) {
	d, addr := startThreeGroups(t, Config{Cluster: true})
	c := rawDial(t, addr)
	down := func(g int) {
		d.mu.Lock()
		d.down, d.err = g, &errcode.Error{Code: errcode.ClusterDown}
		d.mu.Unlock()
	}
	// foo is in group 2, bar in group 0.
	down(2)
	if got := string(c.do(t, "WATCH", "foo")); !strings.HasPrefix(got, "-CLUSTERDOWN") {
		t.Fatalf("WATCH in a failing group: %s", got)
	}
	down(-1)
	c.send(t, encode("MULTI")+encode("SET", "foo", "1")+encode("EXEC")+encode("GET", "foo"))
	for _, want := range []string{"+OK", "+QUEUED", "*-1", "$-1"} {
		if got := string(c.read(t)); got != want {
			t.Fatalf("after a failed WATCH: %s, want %s", got, want)
		}
	}
	if got := string(c.do(t, "WATCH", "foo")); got != "+OK" {
		t.Fatalf("WATCH: %s", got)
	}
	c.send(t, encode("MULTI")+encode("SET", "foo", "1")+encode("GET", "foo"))
	for range 3 {
		c.read(t)
	}
	down(2)
	c.send(t, encode("EXEC")+encode("PING"))
	if got := string(c.read(t)); !strings.HasPrefix(got, "-CLUSTERDOWN") {
		t.Fatalf("EXEC whose check failed to run: %s", got)
	}
	if got := string(c.read(t)); got != "+PONG" {
		t.Fatalf("the reply after EXEC: %s, want +PONG (EXEC replies once)", got)
	}
	down(-1)
	c.send(t, encode("WATCH", "foo")+encode("WATCH", "bar")+encode("MULTI")+encode("EXEC"))
	for _, want := range []string{"+OK", "+OK", "+OK", "-CROSSSLOT Keys in request don't hash to the same slot"} {
		if got := string(c.read(t)); got != want {
			t.Fatalf("WATCH in two groups: %s, want %s", got, want)
		}
	}
}
