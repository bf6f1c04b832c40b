package resp

import (
	"strings"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/slots"
)

// MULTI/EXEC, as far as clients that wrap reads in a transaction need it
// (rueidis's cached reads are `CLIENT CACHING YES, MULTI, PTTL k, cmd,
// EXEC`). Between MULTI and EXEC commands are checked (name, arity) and
// queued, replying QUEUED; EXEC runs them as one batch, in order, at one
// clock time, and replies the array of their replies. A command refused
// while queuing makes EXEC reply EXECABORT, as in Redis. What differs from
// Redis: the batch is not isolated from other connections' commands
// running at the same time in an in-memory server (each key's operations
// are atomic, as always; a Raft group applies its log's entries one at a
// time, so there it is).
//
// WATCH registers its keys through the log (engine.OpWatch) and keeps the
// stamps it replies; EXEC sends engine.OpWatchCheck with them before the
// transaction's ops, in the same batch, and the key's group decides at
// apply time whether a watched key changed: if one did, the engine skips
// the ops and EXEC replies a null array (docs/design.md, "WATCH"). KEYS and SCAN are refused inside a transaction:
// their replies grow with the keyspace (their command's op GrowsReply), and
// a transaction's replies are rendered at once.

// maxMultiQueue bounds the commands one transaction may queue.
const maxMultiQueue = 4096

// maxWatchedKeys bounds the keys one connection watches; past it (or
// after a WATCH that failed) the connection's next EXEC fails as if a
// watched key had changed (client.watchFull).
const maxWatchedKeys = 4096

// execAborted is EXEC's pending.arg once its watch check failed.
const execAborted = 1

// watchedKey is a key WATCH registered, with the stamp its OpWatch
// replied (engine.WatchStamp).
type watchedKey struct {
	key, stamp []byte
	db         uint8
}

// unwatch forgets the connection's watched keys (EXEC, DISCARD, UNWATCH,
// RESET).
func (c *client) unwatch() {
	c.watched = nil
	c.watchFull = false
}

// addWatch records a watched key (the first stamp of a key watched twice
// stands, as Redis keeps the first WATCH).
func (c *client) addWatch(key []byte, db uint8, stamp []byte) {
	for _, w := range c.watched {
		if w.db == db && string(w.key) == string(key) {
			return
		}
	}
	if len(c.watched) >= maxWatchedKeys {
		c.watchFull = true
		return
	}
	c.watched = append(c.watched, watchedKey{key: append([]byte(nil), key...), stamp: stamp, db: db})
}

// multiState is a transaction being queued.
type multiState struct {
	cmds  [][][]byte // owned copies of the queued commands' arguments
	bytes int64
	dirty bool // a command was refused: EXEC aborts
	// group is the Raft group of the keyed commands queued so far, +1 (0:
	// none yet): on a node with several groups a transaction stays in one,
	// as Redis Cluster keeps one in one slot.
	group int
}

// transactionCommands are MULTI, EXEC and DISCARD. Inside a transaction
// the pipeline runner handles them (multiStep); their run functions here
// answer them outside one.
func transactionCommands() []*command {
	return []*command{
		{
			name: "multi", arity: 1, flags: flagFast, group: "transactions", since: "1.2.0",
			complexity: "O(1)", summary: "Start queuing commands for EXEC",
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.multi = &multiState{}
				c.local.OK()
			},
		},
		{
			name: "exec", arity: 1, group: "transactions", since: "1.2.0",
			complexity: "O(N) commands", summary: "Run the queued commands as one batch; nil if a watched key changed",
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.local.Error(msgExecNoMulti.Text())
			},
			// The render of EXEC with watched keys (multiStep): the array
			// header, or a null array once the check failed.
			render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) {
				if results[0].Count == 1 {
					r.Array(p.skipAfter)
					return
				}
				p.arg = execAborted
				r.NullArray()
			},
		},
		{
			name: "discard", arity: 1, flags: flagFast, group: "transactions", since: "2.0.0",
			complexity: "O(N) commands", summary: "Forget the queued commands",
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.local.Error(msgDiscardNoMulti.Text())
			},
		},
		{
			name: "watch", arity: -2, flags: flagFast, firstKey: 1, lastKey: -1, keyStep: 1,
			group: "transactions", since: "2.2.0", complexity: "O(1) for every key",
			summary: "Make the next EXEC run nothing if one of the keys changes before it",
			args:    []argDoc{multiple(keyArg("key"))},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				p.owner = c
				for _, k := range args[1:] {
					c.enqueue(p, engine.Op{Code: engine.OpWatch, Key: k})
				}
				// Its render records the stamps: an EXEC pipelined after
				// it must be dispatched once they are known.
				c.endSegment = true
			},
			render: func(s *Server, r *replyBuf, p *pending, results []engine.Result) {
				c := p.owner
				for i := range results {
					if err := results[i].Err; err != nil {
						// The key is not watched: the next EXEC must not
						// run as if it were.
						c.watchFull = true
						r.Error(errorText(err))
						return
					}
				}
				for i := range results {
					op := &c.ops[p.opStart+i]
					c.addWatch(op.Key, op.DB, engine.WatchStamp(&results[i], op.DB))
				}
				r.OK()
			},
		},
		{
			name: "unwatch", arity: 1, flags: flagFast, group: "transactions", since: "2.2.0",
			complexity: "O(1)", summary: "Forget the watched keys",
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.unwatch()
				c.local.OK()
			},
		},
	}
}

// newPending appends a pending reply to the segment and returns it.
func (c *client) newPending() *pending {
	c.pending = append(c.pending, pending{})
	p := &c.pending[len(c.pending)-1]
	p.proto = c.proto
	p.localStart, p.localEnd = len(c.local.b), len(c.local.b)
	p.opStart, p.opEnd = len(c.ops), len(c.ops)
	c.local.proto = c.proto
	return p
}

// localReply appends a pending reply rendered now by render.
func (c *client) localReply(cmd *command, render func(r *replyBuf)) {
	p := c.newPending()
	p.cmd = cmd
	if cmd != nil {
		p.stats = cmd.stats
	}
	render(&c.local)
	p.localEnd = len(c.local.b)
}

// multiStep handles one command of a connection inside a transaction.
func (s *Server) multiStep(c *client, args [][]byte) {
	m := c.multi
	cmd := s.lookup(args[0])
	name := ""
	if cmd != nil {
		name = cmd.name
	}
	switch {
	case name == "exec":
		c.multi = nil
		watched, full := c.watched, c.watchFull
		c.unwatch()
		if m.dirty {
			c.localReply(cmd, func(r *replyBuf) {
				r.Error(msgExecAbort.Text())
			})
			return
		}
		if full {
			c.localReply(cmd, func(r *replyBuf) { r.NullArray() })
			return
		}
		if len(watched) > 0 {
			s.execWatched(c, cmd, m, watched)
			return
		}
		c.localReply(cmd, func(r *replyBuf) { r.Array(len(m.cmds)) })
		c.execing = true
		for _, q := range m.cmds {
			s.dispatch(c, q, c.newPending())
		}
		c.execing = false
		if c.tracking != nil {
			c.tracking.caching = 0
		}
	case name == "discard":
		c.multi = nil
		c.unwatch()
		c.localReply(cmd, func(r *replyBuf) { r.OK() })
		if c.tracking != nil {
			c.tracking.caching = 0
		}
	case name == "reset" || name == "quit":
		c.multi = nil // they end the transaction and act at once, as in Redis
		s.dispatch(c, args, c.newPending())
	case name == "multi":
		c.localReply(cmd, func(r *replyBuf) { r.Error(msgMultiNested.Text()) })
	case name == "watch":
		// Answered, not queued, and the transaction goes on (Redis).
		c.localReply(cmd, func(r *replyBuf) { r.Error(msgWatchInMulti.Text()) })
	case cmd == nil || !c.authed && !cmd.flags.has(flagNoAuth) || !cmd.arityOK(len(args)):
		m.dirty = true
		s.dispatch(c, args, c.newPending()) // renders the error
	case cmd.op.GrowsReply():
		m.dirty = true
		c.localReply(cmd, func(r *replyBuf) {
			r.Error(msgNotInMulti.Text(strings.ToUpper(name)))
		})
	case s.clusterOn && (cmd.firstKey > 0 || cmd.keysOf != nil) && s.clusterRoute(cmd, args, c.readOnly) != "":
		// MOVED or CROSSSLOT at queue time, as Redis Cluster replies;
		// EXEC then aborts (clustercmd.go).
		m.dirty = true
		msg := s.clusterRoute(cmd, args, c.readOnly)
		c.localReply(cmd, func(r *replyBuf) { r.Error(msg) })
	case !m.sameGroup(s, cmd, args):
		m.dirty = true
		c.localReply(cmd, func(r *replyBuf) { r.Error(msgCrossSlot.Text()) })
	case len(m.cmds) >= maxMultiQueue || m.bytes > s.cfg.Limits.MaxQueryBuffer:
		m.dirty = true
		c.localReply(cmd, func(r *replyBuf) { r.Error(msgMultiTooLong.Text()) })
	default:
		q := make([][]byte, len(args))
		for i, a := range args {
			q[i] = append([]byte(nil), a...)
			m.bytes += int64(len(a))
		}
		m.cmds = append(m.cmds, q)
		// Not counted in the metrics: the command is, when EXEC runs it.
		c.localReply(nil, func(r *replyBuf) { r.Simple("QUEUED") })
	}
}

// execWatched dispatches EXEC of a transaction with watched keys: the
// watch check first, then the queued commands, in one batch; EXEC's render
// replies the array header or, when the check failed, a null array and
// the queued commands' replies are left out (runSegment).
func (s *Server) execWatched(c *client, cmd *command, m *multiState, watched []watchedKey) {
	if s.slotTable.Groups() > 1 {
		// The check runs in the transaction's group: every watched key
		// must be there, as every queued key is.
		g := m.group
		for _, w := range watched {
			wg := s.slotTable.Group(slots.Of(w.key)) + 1
			if g == 0 {
				g = wg
			}
			if wg != g {
				c.localReply(cmd, func(r *replyBuf) { r.Error(msgCrossSlot.Text()) })
				return
			}
		}
	}
	args := make([][]byte, 0, 2*len(watched))
	for _, w := range watched {
		args = append(args, w.key, w.stamp)
	}
	p := c.newPending()
	p.cmd, p.stats, p.owner = cmd, cmd.stats, c
	c.enqueue(p, engine.Op{Code: engine.OpWatchCheck, Key: watched[0].key, Args: args})
	p.opEnd = len(c.ops)
	at, check := len(c.pending)-1, len(c.ops)-1
	prev := c.db
	c.execing = true
	for _, q := range m.cmds {
		s.dispatch(c, q, c.newPending())
	}
	c.execing = false
	c.ops[check].Count = int64(len(c.ops) - check - 1)
	c.pending[at].skipAfter = len(m.cmds)
	if c.db != prev {
		// A queued SELECT ran at dispatch: if the check fails it is
		// undone, before the commands after EXEC are dispatched.
		c.pending[at].prevDB, c.pending[at].dbChanged = prev, true
		c.endSegment = true
	}
	if c.tracking != nil {
		c.tracking.caching = 0
	}
}

// undoTx undoes what the queued commands of EXEC's transaction did to the
// connection at dispatch when its watch check failed: its SELECT.
func (p *pending) undoTx() {
	if p.dbChanged {
		p.owner.setDB(p.prevDB)
	}
}

// sameGroup reports whether a keyed command's keys are in the Raft group
// of the transaction's earlier keyed commands (and records the group of
// the first). clusterRoute has checked that its own keys share a group.
func (m *multiState) sameGroup(s *Server, cmd *command, args [][]byte) bool {
	keys := cmd.keys(args)
	if s.slotTable.Groups() == 1 || len(keys) == 0 {
		return true
	}
	g := s.slotTable.Group(slots.Of(keys[0])) + 1
	if m.group == 0 {
		m.group = g
	}
	return m.group == g
}
