package resp

import (
	"crypto/sha1"
	"encoding/hex"
	"net"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/internal/slots"
)

// clusterSubcommands are Redis 7's CLUSTER subcommands with their arities
// (name included, as COMMAND reports them). On a standalone node each one
// answers msgClusterDisabled once its arity is right, exactly as
// redis-server without cluster-enabled does; an unknown one gets the
// unknown-subcommand error.
var clusterSubcommands = []struct {
	name  string
	arity int
}{
	{"addslots", -3}, {"addslotsrange", -4}, {"bumpepoch", 2}, {"count-failure-reports", 3},
	{"countkeysinslot", 3}, {"delslots", -3}, {"delslotsrange", -4}, {"failover", -2},
	{"flushslots", 2}, {"forget", 3}, {"getkeysinslot", 4}, {"help", 2}, {"info", 2},
	{"keyslot", 3}, {"links", 2}, {"meet", -4}, {"myid", 2}, {"myshardid", 2}, {"nodes", 2},
	{"replicas", 3}, {"replicate", 3}, {"reset", -2}, {"saveconfig", 2},
	{"set-config-epoch", 3}, {"setslot", -4}, {"shards", 2}, {"slaves", 3}, {"slots", 2},
}

// clusterDisabledCommands are the commands of the Redis Cluster protocol as
// a standalone node answers them: CLUSTER (every subcommand) and READONLY,
// READWRITE and ASKING all reply msgClusterDisabled. Cluster-aware clients
// (rueidis, ioredis, go-redis's ClusterClient) read that error as "not a
// cluster" and fall back to a single-node client.
func clusterDisabledCommands() []*command {
	disabled := func(s *Server, c *client, args [][]byte, p *pending) { c.local.Error(msgClusterDisabled.Text()) }
	cluster := &command{
		name: "cluster", arity: -2, group: "cluster", since: "3.0.0", complexity: "O(1)",
		summary: "Redis Cluster commands (this node is standalone: they reply that cluster support is disabled)",
		run:     runSubcommand,
	}
	for _, sc := range clusterSubcommands {
		cluster.subs = append(cluster.subs, &command{
			name: "cluster|" + sc.name, arity: sc.arity, group: "cluster", since: "3.0.0",
			complexity: "O(1)", summary: "Replies that cluster support is disabled", run: disabled,
		})
	}
	plain := func(name string) *command {
		return &command{
			name: name, arity: 1, flags: flagFast, group: "cluster", since: "3.0.0",
			complexity: "O(1)", summary: "Replies that cluster support is disabled", run: disabled,
		}
	}
	return []*command{cluster, plain("readonly"), plain("readwrite"), plain("asking")}
}

// ---- a cluster node: the Redis Cluster protocol over Raft groups ----
//
// A node started as a member of a cluster speaks the Redis Cluster protocol
// so that cluster-aware clients (go-redis's ClusterClient, ioredis's
// Cluster, redis-py's RedisCluster, redis-cli -c, redis-benchmark
// --cluster) work with their defaults. Every slot range is owned by one
// Raft group; its leader is the range's master and the group's other
// members its replicas. The 16384 slots are split into --shards contiguous
// ranges, one per group (slots.Even).
// The topology comes from the executor (ClusterAdmin.Topology), which
// keeps every member's RESP address in the replicated log, so every node
// answers alike.

// clusterNodeID is the Redis Cluster node ID of a Raft server ID: 40
// lower-case hex digits (the SHA-1 of the Raft ID), stable across restarts
// and the same on every node.
func clusterNodeID(raftID string) string {
	sum := sha1.Sum([]byte(raftID))
	return hex.EncodeToString(sum[:])
}

// splitHostPort splits a RESP address for the cluster replies; an address
// that does not parse reports host "" and port 0, as Redis reports a node
// whose address it does not know.
func splitHostPort(addr string) (string, int) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0
	}
	return host, port
}

// clusterView is a topology prepared for the replies: each group's master
// and replicas with known addresses.
type clusterView struct {
	top   slots.Topology
	addrs map[string]string // RESP address by Raft ID, known ones only
}

func (s *Server) clusterView() clusterView {
	v := clusterView{top: s.admin.Topology(), addrs: map[string]string{}}
	for _, n := range v.top.Nodes {
		if n.RESPAddr != "" {
			v.addrs[n.ID] = n.RESPAddr
		}
	}
	return v
}

// served reports whether group g has a leader whose address is known: a
// slot range clients can be sent to.
func (v clusterView) served(g slots.Group) bool {
	_, ok := v.addrs[g.Leader]
	return g.Leader != "" && ok
}

// replicas returns the IDs of group g's members other than its leader
// whose addresses are known, in ID order.
func (v clusterView) replicas(g slots.Group) []string {
	var out []string
	for _, n := range v.top.Nodes {
		if n.ID != g.Leader && n.RESPAddr != "" {
			out = append(out, n.ID)
		}
	}
	return out
}

// ok reports whether every group has a served leader (cluster_state:ok).
func (v clusterView) ok() bool {
	for _, g := range v.top.Groups {
		if !v.served(g) {
			return false
		}
	}
	return len(v.top.Groups) > 0
}

// clusterCommands are CLUSTER, READONLY, READWRITE and ASKING on a cluster
// node. The CLUSTER subcommands that change slot assignment or membership
// by hand have no meaning here (Raft decides both) and say so.
func clusterCommands() []*command {
	cluster := &command{
		name: "cluster", arity: -2, group: "cluster", since: "3.0.0", complexity: "O(1)",
		summary: "Redis Cluster commands: the Raft leader masters its slot range, the other members are its replicas",
		run:     runSubcommand,
	}
	impl := map[string]func(s *Server, c *client, args [][]byte, p *pending){
		"slots":  runClusterSlots,
		"shards": runClusterShards,
		"nodes":  runClusterNodes,
		"info":   runClusterInfo,
		"myid": func(s *Server, c *client, args [][]byte, p *pending) {
			c.local.BulkString(clusterNodeID(s.admin.Topology().Self))
		},
		"keyslot": func(s *Server, c *client, args [][]byte, p *pending) { c.local.Int(int64(slots.Of(args[1]))) },
		"help":    runClusterHelp,
	}
	for _, sc := range clusterSubcommands {
		run, ok := impl[sc.name]
		summary := "Redis Cluster's CLUSTER " + strings.ToUpper(sc.name)
		if !ok {
			name := strings.ToUpper(sc.name)
			run = func(s *Server, c *client, args [][]byte, p *pending) {
				c.local.Error(msgClusterUnsupported.Text(name))
			}
			summary = "Not supported: Raft assigns slots and members"
		}
		cluster.subs = append(cluster.subs, &command{
			name: "cluster|" + sc.name, arity: sc.arity, group: "cluster", since: "3.0.0",
			complexity: "O(N) nodes", summary: summary, run: run,
		})
	}
	ok := func(name, summary string, readOnly func(c *client) bool) *command {
		return &command{
			name: name, arity: 1, flags: flagFast, group: "cluster", since: "3.0.0",
			complexity: "O(1)", summary: summary,
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.readOnly = readOnly(c)
				c.local.OK()
			},
		}
	}
	return []*command{cluster,
		ok("readonly", "Serve read-only commands here even with --redirect (the leader still decides them)", func(*client) bool { return true }),
		ok("readwrite", "Redirect read-only commands again, after READONLY", func(*client) bool { return false }),
		ok("asking", "Replies OK: slots never migrate, so no ASK redirection is ever sent", func(c *client) bool { return c.readOnly }),
	}
}

func runClusterHelp(s *Server, c *client, args [][]byte, p *pending) {
	lines := []string{
		"CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"INFO", "    Return information about the cluster.",
		"KEYSLOT <key>", "    Return the hash slot for <key>.",
		"MYID", "    Return the node id.",
		"NODES", "    Return cluster configuration seen by node.",
		"SHARDS", "    Return information about slot range mappings and the nodes associated with them.",
		"SLOTS", "    Return information about slots range mappings.",
		"HELP", "    Print this help.",
	}
	c.local.Array(len(lines))
	for _, l := range lines {
		c.local.Simple(l)
	}
}

// nodeEntry appends a CLUSTER SLOTS node entry: host, port, id and an empty
// map of further endpoints, as Redis 7 sends it.
func nodeEntry(r *replyBuf, id, addr string) {
	host, port := splitHostPort(addr)
	r.Array(4)
	r.BulkString(host)
	r.Int(int64(port))
	r.BulkString(clusterNodeID(id))
	r.Map(0)
}

func runClusterSlots(s *Server, c *client, args [][]byte, p *pending) {
	v := s.clusterView()
	n := 0
	for _, g := range v.top.Groups {
		if v.served(g) {
			n++
		}
	}
	r := &c.local
	r.Array(n)
	for _, g := range v.top.Groups {
		if !v.served(g) {
			continue // as Redis leaves out slots no reachable master serves
		}
		reps := v.replicas(g)
		r.Array(3 + len(reps))
		r.Int(int64(g.First))
		r.Int(int64(g.Last))
		nodeEntry(r, g.Leader, v.addrs[g.Leader])
		for _, id := range reps {
			nodeEntry(r, id, v.addrs[id])
		}
	}
}

func runClusterShards(s *Server, c *client, args [][]byte, p *pending) {
	v := s.clusterView()
	r := &c.local
	r.Array(len(v.top.Groups))
	for _, g := range v.top.Groups {
		r.Map(2)
		r.BulkString("slots")
		r.Array(2)
		r.Int(int64(g.First))
		r.Int(int64(g.Last))
		r.BulkString("nodes")
		var members []slots.Node
		for _, m := range v.top.Nodes { // the leader first, as Redis lists the master
			if m.ID == g.Leader {
				members = append([]slots.Node{m}, members...)
			} else {
				members = append(members, m)
			}
		}
		r.Array(len(members))
		for _, m := range members {
			host, port := splitHostPort(m.RESPAddr)
			role, health := "replica", "online"
			if m.ID == g.Leader {
				role = "master"
			}
			if m.RESPAddr == "" {
				health = "loading" // not yet announced through the log
			}
			r.Map(7)
			r.BulkString("id")
			r.BulkString(clusterNodeID(m.ID))
			r.BulkString("port")
			r.Int(int64(port))
			r.BulkString("ip")
			r.BulkString(host)
			r.BulkString("endpoint")
			r.BulkString(host)
			r.BulkString("role")
			r.BulkString(role)
			r.BulkString("replication-offset")
			r.Int(0)
			r.BulkString("health")
			r.BulkString(health)
		}
	}
}

// masterOf returns the ID of the leader of the first group id belongs to
// but does not lead, or "" when id leads a group (or no group has a leader).
func (v clusterView) masterOf(id string) string {
	for _, g := range v.top.Groups {
		if g.Leader == id {
			return ""
		}
	}
	for _, g := range v.top.Groups {
		if g.Leader != "" {
			return g.Leader
		}
	}
	return ""
}

func runClusterNodes(s *Server, c *client, args [][]byte, p *pending) {
	v := s.clusterView()
	var b strings.Builder
	epoch := strconv.FormatUint(v.top.Epoch, 10)
	for _, m := range v.top.Nodes {
		host, port := splitHostPort(m.RESPAddr)
		flags := ""
		if m.ID == v.top.Self {
			flags = "myself,"
		}
		master := v.masterOf(m.ID)
		if master == "" {
			flags += "master"
		} else {
			flags += "slave"
		}
		if m.RESPAddr == "" {
			flags += ",noaddr"
		}
		masterField, nodeEpoch := "-", epoch
		if master != "" {
			masterField, nodeEpoch = clusterNodeID(master), "0"
		}
		// id ip:port@cport flags master ping-sent pong-recv config-epoch link-state slot...
		b.WriteString(clusterNodeID(m.ID) + " " + host + ":" + strconv.Itoa(port) + "@0 " + flags + " " +
			masterField + " 0 0 " + nodeEpoch + " connected")
		for _, g := range v.top.Groups {
			if g.Leader == m.ID {
				b.WriteString(" " + strconv.Itoa(g.First) + "-" + strconv.Itoa(g.Last))
			}
		}
		b.WriteByte('\n')
	}
	c.local.Verbatim(b.String())
}

func runClusterInfo(s *Server, c *client, args [][]byte, p *pending) {
	v := s.clusterView()
	state, served, size := "fail", 0, 0
	for _, g := range v.top.Groups {
		if v.served(g) {
			served += g.Last - g.First + 1
			size++
		}
	}
	if v.ok() && s.starting() == nil {
		state = "ok"
	}
	epoch := strconv.FormatUint(v.top.Epoch, 10)
	fields := [][2]string{
		{"cluster_state", state},
		{"cluster_slots_assigned", strconv.Itoa(slots.Count)},
		{"cluster_slots_ok", strconv.Itoa(served)},
		{"cluster_slots_pfail", "0"},
		{"cluster_slots_fail", strconv.Itoa(slots.Count - served)},
		{"cluster_known_nodes", strconv.Itoa(len(v.top.Nodes))},
		{"cluster_size", strconv.Itoa(size)},
		{"cluster_current_epoch", epoch},
		{"cluster_my_epoch", epoch},
		{"cluster_stats_messages_sent", "0"},
		{"cluster_stats_messages_received", "0"},
		{"total_cluster_links_buffer_limit_exceeded", "0"},
	}
	var b strings.Builder
	for _, f := range fields {
		b.WriteString(f[0] + ":" + f[1] + "\r\n")
	}
	c.local.Verbatim(b.String())
}

// clusterRoute checks a keyed command on a cluster node before it runs
// (or, inside MULTI, before it is queued; EXEC runs the queue without a
// second check): keys of different groups get CROSSSLOT, and with Redirect
// a follower of the keys' group answers MOVED to the group's leader instead
// of forwarding, unless the connection sent READONLY and the command only
// reads (a Redis Cluster replica serves those; here it forwards them). It
// returns the error reply, or "" when the command runs here. A command
// whose group has no known leader runs as usual (forwarding waits for one,
// or replies CLUSTERDOWN).
func (s *Server) clusterRoute(cmd *command, args [][]byte, readOnly bool) string {
	if !s.cfg.Redirect && s.slotTable.Groups() == 1 {
		return "" // nothing to check: spare the hot path the hashing
	}
	if cmd.keysOf != nil {
		return s.routeKeys(cmd, cmd.keysOf(args), readOnly)
	}
	first := cmd.firstKey
	if first <= 0 || first >= len(args) {
		return ""
	}
	last := cmd.lastKey
	if last < 0 {
		last += len(args)
	}
	last = min(last, len(args)-1)
	step := max(cmd.keyStep, 1)
	slot := slots.Of(args[first])
	group := s.slotTable.Group(slot)
	if s.slotTable.Groups() > 1 {
		for i := first + step; i <= last; i += step {
			if s.slotTable.Group(slots.Of(args[i])) != group {
				return msgCrossSlot.Text()
			}
		}
	}
	return s.redirect(cmd, slot, group, readOnly)
}

// redirect is clusterRoute's MOVED for a command whose keys hash to slot,
// of group: "" unless --redirect is on and another node leads the group
// (a read-only command of a READONLY connection stays).
func (s *Server) redirect(cmd *command, slot, group int, readOnly bool) string {
	if !s.cfg.Redirect || readOnly && cmd.flags.has(flagReadonly) {
		return ""
	}
	addr, local := s.admin.Route(group)
	if local || addr == "" {
		return ""
	}
	return msgMoved.Text(strconv.Itoa(slot), addr)
}

// routeKeys is clusterRoute for a command whose keys keysOf found.
func (s *Server) routeKeys(cmd *command, keys [][]byte, readOnly bool) string {
	if len(keys) == 0 {
		return ""
	}
	slot := slots.Of(keys[0])
	group := s.slotTable.Group(slot)
	for _, k := range keys[1:] {
		if s.slotTable.Group(slots.Of(k)) != group {
			return msgCrossSlot.Text()
		}
	}
	return s.redirect(cmd, slot, group, readOnly)
}

// redisMode is what HELLO's mode and INFO's redis_mode say: "cluster" on a
// node that speaks the Redis Cluster protocol, as Redis does.
func (s *Server) redisMode() string {
	if s.clusterOn {
		return "cluster"
	}
	return "standalone"
}
