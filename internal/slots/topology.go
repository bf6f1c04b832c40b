package slots

// Topology is a cluster as the Redis Cluster commands report it: its nodes
// and, for each group (one slot range), the node leading it. The replication
// layer builds it; the RESP server renders it, so neither needs the other.
type Topology struct {
	// Self is this node's ID.
	Self string
	// Epoch is the Raft term this node knows (reported as Redis's
	// configuration epoch).
	Epoch uint64
	// Nodes are the cluster's voters, ordered by ID.
	Nodes []Node
	// Groups are the slot ranges in slot order, one per Raft group.
	Groups []Group
}

// Node is one member of the cluster.
type Node struct {
	// ID is the member's Raft server ID.
	ID string
	// RESPAddr is the host:port its clients connect to, as the member
	// announced it through the log; "" until it has.
	RESPAddr string
}

// Group is one Raft group and the slots it owns.
type Group struct {
	Range
	// Leader is the ID of the group's leader, "" while it has none.
	Leader string
}
