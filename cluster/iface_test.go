package cluster

import "github.com/sluice-rl/sluice/resp"

// Node is what the RESP server needs behind it.
var (
	_ resp.Executor     = (*Node)(nil)
	_ resp.ClusterAdmin = (*Node)(nil)
)
