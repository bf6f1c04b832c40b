package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/internal/testkit/proccluster"
)

// groupStatus is what a fake node reports for one Raft group.
type groupStatus struct {
	role            string
	applied, commit int
}

// fakeNode answers RAFT.STATUS [group] as a node of several groups does,
// from a table the test changes: the group is parsed, never assumed.
type fakeNode struct {
	mu     sync.Mutex
	groups []groupStatus
}

func (f *fakeNode) set(g int, st groupStatus) {
	f.mu.Lock()
	f.groups[g] = st
	f.mu.Unlock()
}

// startFakeNode serves f on 127.0.0.1 and returns a node pointing at it.
func startFakeNode(t *testing.T, id string, f *fakeNode) *sluiceproc.Node {
	t.Helper()
	ln := testkit.Listen(t)
	go func() {
		_ = redcon.Serve(ln, func(conn redcon.Conn, cmd redcon.Command) {
			if !strings.EqualFold(string(cmd.Args[0]), "raft.status") || len(cmd.Args) > 2 {
				conn.WriteError("ERR unexpected command")
				return
			}
			g := 0
			if len(cmd.Args) == 2 {
				var err error // each connection's own: the handler runs on many goroutines
				if g, err = strconv.Atoi(string(cmd.Args[1])); err != nil || g < 0 || g >= len(f.groups) {
					conn.WriteError("ERR invalid group")
					return
				}
			}
			f.mu.Lock()
			st := f.groups[g]
			f.mu.Unlock()
			fields := []string{"id", id, "role", st.role, "commit_index", strconv.Itoa(st.commit),
				"applied_index", strconv.Itoa(st.applied)}
			conn.WriteArray(len(fields))
			for _, s := range fields {
				conn.WriteBulkString(s)
			}
		}, nil, nil)
	}()
	return &sluiceproc.Node{ID: id, RESP: ln.Addr().String()}
}

// TestGroupLeadersAndConvergence: the nemesis finds the leader of the group
// it names, and convergence waits for a leader and equal applied and commit
// indexes in every group, not only group 0.
func TestGroupLeadersAndConvergence(t *testing.T) {
	const groups = 3
	fakes := make([]*fakeNode, 3)
	var nodes []*sluiceproc.Node
	for i := range fakes {
		fakes[i] = &fakeNode{groups: make([]groupStatus, groups)}
		nodes = append(nodes, startFakeNode(t, fmt.Sprintf("n%d", i+1), fakes[i]))
	}
	// The fakes run already: the chaos cluster attaches to them.
	c := &cluster{Cluster: proccluster.Attach(nodes), shards: groups}
	c.nodes = c.Cluster.Nodes
	// Node i leads group i; every group has applied all it committed.
	converged := func() {
		for i, f := range fakes {
			for g := range groups {
				st := groupStatus{role: "follower", applied: 100 + g, commit: 100 + g}
				if g == i {
					st.role = "leader"
				}
				f.set(g, st)
			}
		}
	}
	converged()
	ctx := context.Background()
	for g := range groups {
		nd, err := c.Leader(ctx, g, time.Second)
		if err != nil || nd != c.nodes[g] {
			t.Fatalf("leader of group %d: %v %v, want %s", g, nd, err, c.nodes[g].ID)
		}
	}
	idx, same, err := c.appliedIndexes()
	if err != nil || !same || !slices.Equal(idx, []uint64{100, 101, 102}) {
		t.Fatalf("converged: %v %v %v, want [100 101 102] true", idx, same, err)
	}

	tests := []struct {
		name   string
		node   int
		group  int
		st     groupStatus
		reason string
	}{
		{"a group without a leader", 1, 1, groupStatus{role: "candidate", applied: 101, commit: 101}, "group 1 has no leader"},
		{"a group applied behind its commit", 2, 2, groupStatus{role: "leader", applied: 101, commit: 102}, "group 2: n3 applied 101 commit 102"},
		{"a group behind on one node", 0, 1, groupStatus{role: "follower", applied: 99, commit: 99}, "group 1: n1 applied 99 commit 99"},
	}
	for _, tc := range tests {
		converged()
		fakes[tc.node].set(tc.group, tc.st)
		_, same, err := c.appliedIndexes()
		if same || err == nil || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%s: same %v, err %v, want not converged: %q", tc.name, same, err, tc.reason)
		}
	}
	converged()
	fakes[1].set(1, groupStatus{role: "follower", applied: 101, commit: 101})
	if nd, err := c.Leader(ctx, 1, 200*time.Millisecond); err == nil {
		t.Fatalf("leader of a leaderless group: %s, want an error", nd.ID)
	}
}
