package cluster

import "github.com/sluice-rl/sluice/resp"

// A Host is what the RESP server needs behind it; a Node executes.
var (
	_ resp.Executor     = (*Host)(nil)
	_ resp.ClusterAdmin = (*Host)(nil)
	_ resp.Executor     = (*Node)(nil)
)
