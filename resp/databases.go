package resp

import (
	"bytes"

	"github.com/sluice-rl/sluice/engine"
)

// Databases (SPEC section 16, docs/commands.md "Databases"): SELECT picks
// the connection's database, which every op it enqueues carries (Op.DB,
// set by client.enqueue); FLUSHDB, SWAPDB and MOVE are engine ops through
// the log like any write. With several Raft groups only database 0
// exists, as in Redis Cluster.

// dbArg parses a database index as Redis does (getIntFromObject, then the
// range): ok false after replying the error; notInt is the text for a
// non-integer.
func dbArg(c *client, arg []byte, notInt string) (uint8, bool) {
	n, ok := engine.ParseInt(arg)
	switch {
	case !ok || n < -1<<31 || n >= 1<<31:
		c.local.Error(notInt)
		return 0, false
	case n < 0 || n >= engine.NumDBs:
		c.local.Error(msgDBIndex.Text())
		return 0, false
	}
	return uint8(n), true
}

// sharded reports whether the node has several Raft groups: database 0
// only.
func (s *Server) sharded() bool { return s.slotTable.Groups() > 1 }

// databaseCommands are SELECT's relatives: FLUSHDB, SWAPDB, MOVE.
func databaseCommands() []*command {
	flushType := optional(argDoc{name: "flush-type", typ: "oneof", subargs: []argDoc{{name: "async", typ: "pure-token", token: "ASYNC"}, {name: "sync", typ: "pure-token", token: "SYNC"}}})
	return []*command{
		{
			name: "flushdb", arity: -1, flags: flagWrite,
			group: "server", since: "1.0.0", complexity: "O(N) keys",
			summary: "Forget every key of the connection's database",
			args:    []argDoc{flushType},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				if len(args) > 2 || len(args) == 2 && !bytes.EqualFold(args[1], []byte("async")) && !bytes.EqualFold(args[1], []byte("sync")) {
					c.local.Error(msgSyntax.Text())
					return
				}
				c.enqueue(p, engine.Op{Code: engine.OpFlushDB})
			},
			render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) { r.OK() },
		},
		{
			name: "swapdb", arity: 3, flags: flagWrite | flagFast,
			group: "server", since: "4.0.0", complexity: "O(N) stripes",
			summary: "Swap two databases: each one's keys become the other's",
			args:    []argDoc{intArg("index1"), intArg("index2")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				if s.sharded() {
					c.local.Error(msgNotInCluster.Text("SWAPDB"))
					return
				}
				a, ok := dbArg(c, args[1], msgSwapDBFirst.Text())
				if !ok {
					return
				}
				b, ok := dbArg(c, args[2], msgSwapDBSecond.Text())
				if !ok {
					return
				}
				c.enqueueDB(p, engine.Op{Code: engine.OpSwapDB, DB: a, Count: int64(b)})
			},
			render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) {
				if err := results[0].Err; err != nil {
					r.Error(errorText(err))
					return
				}
				r.OK()
			},
		},
		{
			name: "move", arity: 3, flags: flagWrite | flagFast,
			firstKey: 1, lastKey: 1, keyStep: 1,
			group: "keyspace", since: "1.0.0", complexity: "O(1)",
			summary: "Move a key to another database; 1 if moved",
			args:    []argDoc{keyArg("key"), intArg("db")},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				if s.sharded() {
					c.local.Error(msgNotInCluster.Text("MOVE"))
					return
				}
				dst, ok := dbArg(c, args[2], msgNotInteger.Text())
				if !ok {
					return
				}
				if dst == c.db {
					c.local.Error(msgMoveSame.Text())
					return
				}
				c.enqueue(p, engine.Op{Code: engine.OpMove, Key: args[1], Count: int64(dst)})
			},
			render: renderStrCount,
		},
	}
}

// runSelect is SELECT.
func runSelect(s *Server, c *client, args [][]byte, p *pending) {
	n, ok := engine.ParseInt(args[1])
	switch {
	case !ok || n < -1<<31 || n >= 1<<31:
		c.local.Error(msgNotInteger.Text())
	case s.sharded() && n != 0:
		c.local.Error(msgNotInCluster.Text("SELECT"))
	case n < 0 || n >= engine.NumDBs:
		c.local.Error(msgDBIndex.Text())
	default:
		c.setDB(uint8(n))
		c.local.OK()
	}
}

// setDB makes db the connection's database.
func (c *client) setDB(db uint8) {
	c.db = db
	c.mu.Lock()
	c.shownDB = db
	c.mu.Unlock()
}
