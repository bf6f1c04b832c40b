package resp

import (
	"strings"

	"github.com/sluice-rl/sluice/internal/slots"
)

// MULTI/EXEC, as far as clients that wrap reads in a transaction need it
// (rueidis's cached reads are `CLIENT CACHING YES, MULTI, PTTL k, cmd,
// EXEC`). Between MULTI and EXEC commands are checked (name, arity) and
// queued, replying QUEUED; EXEC runs them as one batch, in order, at one
// clock time, and replies the array of their replies. A command refused
// while queuing makes EXEC reply EXECABORT, as in Redis. What differs from
// Redis: there is no WATCH, and the batch is not isolated from other
// connections' commands running at the same time (each key's operations
// are atomic, as always). KEYS and SCAN are refused inside a transaction:
// their replies grow with the keyspace (their command's op GrowsReply), and
// a transaction's replies are rendered at once.

// maxMultiQueue bounds the commands one transaction may queue.
const maxMultiQueue = 4096

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
			complexity: "O(N) commands", summary: "Run the queued commands as one batch",
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.local.Error(msgExecNoMulti.Text())
			},
		},
		{
			name: "discard", arity: 1, flags: flagFast, group: "transactions", since: "2.0.0",
			complexity: "O(N) commands", summary: "Forget the queued commands",
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				c.local.Error(msgDiscardNoMulti.Text())
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
		if m.dirty {
			c.localReply(cmd, func(r *replyBuf) {
				r.Error(msgExecAbort.Text())
			})
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
		c.localReply(cmd, func(r *replyBuf) { r.OK() })
		if c.tracking != nil {
			c.tracking.caching = 0
		}
	case name == "reset" || name == "quit":
		c.multi = nil // they end the transaction and act at once, as in Redis
		s.dispatch(c, args, c.newPending())
	case name == "multi":
		c.localReply(cmd, func(r *replyBuf) { r.Error(msgMultiNested.Text()) })
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
