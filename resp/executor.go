package resp

import (
	"context"
	"crypto/sha256"

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

// Starter is implemented by executors that need a while after the server
// listens before they can serve (a Raft node: a leader to elect, a log to
// replay, a cluster version to reach). Until Starting returns nil, PING
// answers its error (LOADING, as Redis does while it loads), INFO says
// loading:1 and CLUSTER INFO cluster_state:fail, so a client that waits
// for any of them sends commands that work. Once nil, it stays nil.
type Starter interface {
	Starting() error
}

// ClusterAdmin is implemented by executors that are a Raft node. The server
// offers the RAFT.* commands and INFO's raft section only when its executor
// implements it.
type ClusterAdmin interface {
	// Groups returns the number of Raft groups (slot ranges), at least 1.
	Groups() int
	// Status returns RAFT.STATUS's field-value pairs for group g, in
	// order.
	Status(g int) [][2]string
	// Join adds a node to every group: a non-voter, then a voter once it
	// has caught up.
	Join(ctx context.Context, id, raftAddr string) error
	// Remove removes a server from the configuration.
	Remove(ctx context.Context, id string) error
	// Transfer hands group g's leadership to id, or to any voter when id
	// is empty.
	Transfer(ctx context.Context, g int, id string) error
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

// EngineView is what the server reads from the engine state behind its
// executor directly, without going through it: INFO memory, the metrics
// and DEBUG DIGEST. An *engine.Engine is one; Engines is several (one per
// Raft group).
type EngineView interface {
	// Len is the number of keys holding state.
	Len() int
	// MemoryBytes is the engine's accounted memory.
	MemoryBytes() int64
	// Limits returns max-keys and maxmemory (0: none).
	Limits() (maxKeys, maxBytes int64)
	// Digest hashes the state (engine.Engine.Digest) and counts its keys.
	Digest() (sum [sha256.Size]byte, keys int)
}

// Engines is the engines of several Raft groups seen as one: counts and
// limits add up, and the digest hashes the groups' digests in order.
type Engines []*engine.Engine

// Len implements EngineView.
func (es Engines) Len() int {
	n := 0
	for _, e := range es {
		n += e.Len()
	}
	return n
}

// MemoryBytes implements EngineView.
func (es Engines) MemoryBytes() int64 {
	var n int64
	for _, e := range es {
		n += e.MemoryBytes()
	}
	return n
}

// Limits implements EngineView: the sums of the engines' limits (each
// group's engine holds its share of the node's).
func (es Engines) Limits() (maxKeys, maxBytes int64) {
	for _, e := range es {
		k, b := e.Limits()
		maxKeys += k
		maxBytes += b
	}
	return maxKeys, maxBytes
}

// Digest implements EngineView.
func (es Engines) Digest() (sum [sha256.Size]byte, keys int) {
	h := sha256.New()
	for _, e := range es {
		s, k := e.Digest()
		h.Write(s[:])
		keys += k
	}
	copy(sum[:], h.Sum(nil))
	return sum, keys
}
