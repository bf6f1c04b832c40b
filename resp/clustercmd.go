package resp

// errClusterDisabled is Redis's reply to the cluster commands on a server
// started without cluster support.
const errClusterDisabled = "ERR This instance has cluster support disabled"

// clusterSubcommands are Redis 7's CLUSTER subcommands with their arities
// (name included, as COMMAND reports them). On a standalone node each one
// answers errClusterDisabled once its arity is right, exactly as
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
// READWRITE and ASKING all reply errClusterDisabled. Cluster-aware clients
// (rueidis, ioredis, go-redis's ClusterClient) read that error as "not a
// cluster" and fall back to a single-node client.
func clusterDisabledCommands() []*command {
	disabled := func(s *Server, c *client, args [][]byte, p *pending) { c.local.Error(errClusterDisabled) }
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
