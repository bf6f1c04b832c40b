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
	flags      cmdFlags
	firstKey   int
	lastKey    int
	keyStep    int
	group      string
	summary    string
	since      string
	complexity string
	args       []argDoc
	subs       []*command
	decision   bool      // a rate-limit decision: counted by result in the metrics
	stats      *cmdStats // resolved metric children (metrics.go)
	// subErr, when set, is a container's reply to an unknown subcommand
	// or a subcommand's wrong number of arguments (DEBUG's own text);
	// otherwise Redis's errors are used.
	subErr string
	// op is the engine operation the command always enqueues, when its
	// reply grows with the keyspace (the op's GrowsReply: KEYS, SCAN):
	// MULTI refuses such a command (multi.go). 0 for the others.
	op engine.OpCode
	// keysOf, when set, finds the keys of a command whose key positions
	// move (EVAL's numkeys): COMMAND INFO says movablekeys, and the
	// cluster slot check and tracking use it instead of the positions.
	keysOf func(args [][]byte) [][]byte
	// notInScripts refuses the command inside a script although Redis
	// allows it: its reply depends on the node, not on the log (INFO,
	// COMMAND, CLUSTER, RAFT.*, RL.CHECK), so replicas would diverge.
	notInScripts bool

	// run parses the arguments and either renders a reply into c.local or
	// enqueues engine operations (c.enqueue) to be rendered by render.
	run func(s *Server, c *client, args [][]byte, p *pending)
	// render writes the reply of a command that enqueued operations.
	render func(s *Server, r *replyBuf, p *pending, results []engine.Result)
}

// cmdFlags are a command's flags, as COMMAND INFO prints them. They decide
// behaviour too: flagNoAuth lets a command run before AUTH (and be queued
// by MULTI before it); flagLoading lets a command answer while the node
// cannot apply operations (loading, or the cluster down): its render runs
// with the executor's error in its results instead of the reply being that
// error; flagReadonly with the key positions says which keys a read
// registers for client tracking.
type cmdFlags uint16

const (
	flagWrite           cmdFlags = 1 << iota // changes state
	flagReadonly                             // reads state only; its keys are tracked reads
	flagDenyOOM                              // may create a key (the engine refuses it at the memory limit)
	flagLoading                              // answers while loading (renders the executor's error)
	flagStale                                // printed for clients (Redis: allowed on a stale replica)
	flagFast                                 // O(1) or O(log N); printed for clients
	flagNoAuth                               // allowed before AUTH
	flagNoScript                             // refused inside a script (scripts.go)
	flagNoMandatoryKeys                      // printed for clients (EVAL: keys may be none)
	flagMovableKeys                          // printed for clients (the command's keysOf finds its keys)
)

// has reports whether every flag of f is set.
func (fl cmdFlags) has(f cmdFlags) bool { return fl&f == f }

// names lists the flags set, in COMMAND INFO's order (Redis's).
func (fl cmdFlags) names() []string {
	all := [...]struct {
		f    cmdFlags
		name string
	}{{flagWrite, "write"}, {flagReadonly, "readonly"}, {flagDenyOOM, "denyoom"}, {flagNoScript, "noscript"},
		{flagLoading, "loading"}, {flagStale, "stale"}, {flagFast, "fast"}, {flagNoAuth, "no_auth"},
		{flagNoMandatoryKeys, "no_mandatory_keys"}, {flagMovableKeys, "movablekeys"}}
	var out []string
	for _, n := range all {
		if fl.has(n.f) {
			out = append(out, n.name)
		}
	}
	return out
}

// keys returns the key arguments of args as the command's key positions
// (first, last, step) name them.
func (c *command) keys(args [][]byte) [][]byte {
	if c.keysOf != nil {
		return c.keysOf(args)
	}
	if c.firstKey <= 0 || c.firstKey >= len(args) {
		return nil
	}
	last := c.lastKey
	if last < 0 {
		last += len(args)
	}
	if last >= len(args) {
		last = len(args) - 1
	}
	if last < c.firstKey {
		return nil
	}
	if c.keyStep == 1 {
		return args[c.firstKey : last+1]
	}
	var out [][]byte
	for i := c.firstKey; i <= last; i += max(c.keyStep, 1) {
		out = append(out, args[i])
	}
	return out
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
	list = append(list, stringCommands()...)     // strings.go
	list = append(list, collectionCommands()...) // hashes.go, zsets.go, lists.go
	list = append(list, connectionCommands()...)
	list = append(list, serverCommands()...)
	list = append(list, transactionCommands()...)
	list = append(list, databaseCommands()...) // databases.go
	list = append(list, rlsCommands()...)      // rls.go
	list = append(list, scriptCommands()...)   // scripts.go
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
	markScriptRules(table) // scripts.go
	return table
}

// subcommand finds a container command's subcommand by case-insensitive
// name and checks its arity, or replies the error (Redis's, or the
// container's subErr) and returns nil.
func subcommand(c *client, parent *command, args [][]byte) *command {
	want := strings.ToLower(string(args[1]))
	for _, sub := range parent.subs {
		if sub.name == parent.name+"|"+want {
			if sub.arityOK(len(args)) {
				return sub
			}
			if parent.subErr != "" {
				c.local.Error(parent.subErr)
			} else {
				c.local.Error(msgArity.Text(sub.name))
			}
			return nil
		}
	}
	if parent.subErr != "" {
		c.local.Error(parent.subErr)
	} else {
		c.local.Error(msgUnknownSubcommand.Text(printable(args[1], 64), strings.ToUpper(parent.name)))
	}
	return nil
}

// runSubcommand is the run function of container commands (CLIENT, CONFIG,
// COMMAND, DEBUG, CLUSTER): it hands the arguments after the container's
// name to the subcommand, which from then on is the pending command (its
// render, its name in CLIENT LIST).
func runSubcommand(s *Server, c *client, args [][]byte, p *pending) {
	sub := subcommand(c, p.cmd, args)
	if sub == nil {
		return
	}
	p.cmd = sub
	sub.run(s, c, args[1:], p)
}
