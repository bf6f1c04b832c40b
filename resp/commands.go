package resp

import (
	"strings"

	"github.com/sluice-rl/sluice/engine"
)

// command is one entry of the command table. The same entry drives dispatch,
// arity checks, COMMAND INFO and COMMAND DOCS (redis-cli's hints).
type command struct {
	name       string // lower case; "parent|sub" for subcommands
	arity      int    // Redis convention: n exact, -n at least n (name included)
	flags      []string
	firstKey   int
	lastKey    int
	keyStep    int
	group      string
	summary    string
	since      string
	complexity string
	args       []argDoc
	subs       []*command
	noAuth     bool      // allowed before AUTH
	tolerant   bool      // render runs even when the executor failed (results carry the error)
	decision   bool      // a rate-limit decision: counted by result in the metrics
	stats      *cmdStats // resolved metric children (metrics.go)

	// run parses the arguments and either renders a reply into c.local or
	// enqueues engine operations (c.enqueue) to be rendered by render.
	run func(s *Server, c *client, args [][]byte, p *pending)
	// render writes the reply of a command that enqueued operations.
	render func(s *Server, r *replyBuf, p *pending, results []engine.Result)
}

// argDoc documents one argument for COMMAND DOCS.
type argDoc struct {
	name     string
	typ      string // key, string, integer, pattern, pure-token, oneof, block
	token    string
	optional bool
	multiple bool
	subargs  []argDoc
}

func (c *command) arityOK(n int) bool {
	if c.arity >= 0 {
		return n == c.arity
	}
	return n >= -c.arity
}

// Argument documentation helpers.
func keyArg(name string) argDoc { return argDoc{name: name, typ: "key"} }
func strArg(name string) argDoc { return argDoc{name: name, typ: "string"} }
func intArg(name string) argDoc { return argDoc{name: name, typ: "integer"} }
func optional(a argDoc) argDoc  { a.optional = true; return a }
func multiple(a argDoc) argDoc  { a.multiple = true; return a }
func tokenArg(token, name, typ string) argDoc {
	return argDoc{name: name, typ: typ, token: token}
}

// costArg documents the COST option of the RL.* limiter commands.
var costArgDoc = optional(tokenArg("COST", "n", "integer"))

// buildCommandTable returns the command table, keyed by lower-case name.
// The RAFT.* commands are present only when the executor is a Raft node;
// the Redis Cluster commands only on a member of a cluster (redisCluster),
// and a standalone node answers them with Redis's "cluster support
// disabled" error.
func buildCommandTable(cluster, redisCluster bool) map[string]*command {
	list := limiterCommands()
	list = append(list, keyspaceCommands()...)
	list = append(list, connectionCommands()...)
	list = append(list, serverCommands()...)
	list = append(list, transactionCommands()...)
	if cluster {
		list = append(list, raftCommands()...)
	}
	if redisCluster {
		list = append(list, clusterCommands()...) // clustercmd.go
	} else {
		list = append(list, clusterDisabledCommands()...)
	}
	table := make(map[string]*command, len(list))
	for _, c := range list {
		table[c.name] = c
	}
	return table
}

// subcommand finds a container command's subcommand by case-insensitive
// name, or replies Redis's unknown-subcommand error and returns nil.
func subcommand(c *client, parent *command, args [][]byte) *command {
	want := strings.ToLower(string(args[1]))
	for _, sub := range parent.subs {
		if sub.name == parent.name+"|"+want {
			if !sub.arityOK(len(args)) {
				c.local.Error("ERR wrong number of arguments for '" + sub.name + "' command")
				return nil
			}
			return sub
		}
	}
	c.local.Error("ERR unknown subcommand '" + printable(args[1], 64) + "'. Try " + strings.ToUpper(parent.name) + " HELP.")
	return nil
}

// runSubcommand is the run function of container commands (CLIENT, CONFIG,
// COMMAND, DEBUG): it hands the arguments after the container's name to the
// subcommand.
func runSubcommand(s *Server, c *client, args [][]byte, p *pending) {
	sub := subcommand(c, p.cmd, args)
	if sub == nil {
		return
	}
	p.cmd = sub
	sub.run(s, c, args[1:], p)
}
