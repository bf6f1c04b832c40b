package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/proccluster"
)

// node is one sluice process of the cluster (internal/testkit/proccluster):
// its addresses and data directory stay the same across restarts; the
// "replace" fault moves it to its slot's spare addresses.
type node = proccluster.Node

// clusterTimeout is every node's --cluster-timeout: without a majority, a
// command fails with CLUSTERDOWN after this long.
const clusterTimeout = 2 * time.Second

// cluster is three sluice processes on 127.0.0.1, each dialing its peers
// through link proxies, each a member of every one of shards Raft groups.
type cluster struct {
	*proccluster.Cluster
	shards int
	nodes  []*node
	skew   []time.Duration // each node's --debug-clock-skew
}

// newCluster lays out n nodes of shards Raft groups each in out (node
// skewed gets the clock skew, every node the extra flags, -sluice-flags),
// with their proxies and spare addresses, and starts them.
func newCluster(bin, out string, n, shards, skewed int, skew time.Duration, extra []string, log *slog.Logger) (*cluster, error) {
	c := &cluster{shards: shards, skew: make([]time.Duration, n)}
	c.skew[skewed] = skew
	pc, err := proccluster.New(proccluster.Config{
		Bin: bin, Nodes: n, Shards: shards,
		DataDir: filepath.Join(out, "data"), LogDir: out,
		Flags: []string{"--enable-debug-command", "--cluster-timeout", clusterTimeout.String(), "--log-level", "info"},
		// Partitions, replacements, and nodes that die with the chaos
		// tool, however it ends.
		Proxies: true, Spares: true, DieWithParent: true,
		Header: func(nd *node) string {
			return fmt.Sprintf("--- chaos: starting %s at %s", nd.ID, time.Now().Format(time.RFC3339Nano))
		},
		Setup: func(nodes []*node) {
			for i, nd := range nodes {
				if c.skew[i] != 0 {
					nd.Extra = append(nd.Extra, "--debug-clock-skew", c.skew[i].String())
				}
				nd.Extra = append(nd.Extra, extra...)
			}
		},
		Log: log,
	})
	if err != nil {
		return nil, err
	}
	c.Cluster, c.nodes = pc, pc.Nodes
	if err := c.StartAll(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
