package resp

import (
	"context"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/slots"
)

// Executor runs engine operations for the server. On a single in-memory node
// it is the engine itself (LocalExecutor); in a cluster the Raft log stands
// behind it. The server sees replication only through this interface.
type Executor interface {
	// Execute runs ops in order as one batch at one server time and fills
	// results[i] for ops[i] (len(results) == len(ops)). A non-nil error
	// means no outcome is known for any op of the batch (CLUSTERDOWN or
	// LOADING: not applied; UNCERTAIN: may have been applied), coded
	// (internal/errcode): errorText renders it. Per-op failures (WRONGTYPE)
	// are in Result.Err, coded too.
	Execute(ctx context.Context, ops []engine.Op, results []engine.Result) error
}

// ClusterAdmin is implemented by executors that are a Raft node. The server
// offers the RAFT.* commands and INFO's raft section only when its executor
// implements it.
type ClusterAdmin interface {
	// Status returns RAFT.STATUS's field-value pairs, in order.
	Status() [][2]string
	// Join adds a voter.
	Join(ctx context.Context, id, raftAddr string) error
	// Remove removes a server from the configuration.
	Remove(ctx context.Context, id string) error
	// Transfer hands leadership to id, or to any voter when id is empty.
	Transfer(ctx context.Context, id string) error
	// Snapshot takes a snapshot now.
	Snapshot(ctx context.Context) error
	// Topology returns the members, their RESP addresses and each slot
	// range's leader, for the Redis Cluster commands.
	Topology() slots.Topology
	// Route tells where commands for a group's slots run: local when this
	// node leads the group, else the RESP address of its leader ("" while
	// unknown).
	Route(group int) (addr string, local bool)
}
