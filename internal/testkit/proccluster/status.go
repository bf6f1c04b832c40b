package proccluster

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// Waiting on a cluster: a node's RAFT.STATUS, a group's leader, and
// every node serving reads through the log.

// RaftStatus returns node n's RAFT.STATUS of group g as a map, asked on a
// fresh connection within timeout.
func RaftStatus(n *Node, g int, timeout time.Duration) (map[string]string, error) {
	args := []string{"RAFT.STATUS"}
	if g != 0 {
		args = append(args, strconv.Itoa(g))
	}
	v, err := respwire.DoAt(n.RESP, timeout, args...)
	if err != nil {
		return nil, err
	}
	if v.Error() != "" {
		return nil, fmt.Errorf("RAFT.STATUS: %s", v.Str)
	}
	return v.Fields(), nil
}

// Leader returns a running node that says it leads Raft group g
// (RAFT.STATUS g), polling until timeout or ctx's end.
func (c *Cluster) Leader(ctx context.Context, g int, timeout time.Duration) (*Node, error) {
	var leader *Node
	err := testkit.PollContext(ctx, timeout, 50*time.Millisecond, func() error {
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			st, err := RaftStatus(n, g, 500*time.Millisecond)
			if err == nil && st["role"] == "leader" {
				leader = n
				return nil
			}
		}
		return fmt.Errorf("no leader of group %d", g)
	})
	return leader, err
}

// WaitServing polls until each of nodes (every node when none are given)
// answers a read through the log (sluiceproc.Serving: DBSIZE, which runs in
// every Raft group, so a node answers it only once every group has a ready
// leader with a quorum), each read within readTimeout; a node that is down
// or paused is not waited for. It gives up after timeout or when ctx ends.
func (c *Cluster) WaitServing(ctx context.Context, timeout, readTimeout time.Duration, nodes ...*Node) error {
	if len(nodes) == 0 {
		nodes = c.Nodes
	}
	next := 0 // nodes[:next] serve or are down
	return testkit.PollContext(ctx, timeout, 50*time.Millisecond, func() error {
		for ; next < len(nodes); next++ {
			n := nodes[next]
			if !n.Running() {
				continue
			}
			if err := sluiceproc.Serving(n.RESP, readTimeout); err != nil {
				return fmt.Errorf("%s not serving: %w", n.ID, err)
			}
		}
		return nil
	})
}
