package resp

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/rls"
	"github.com/tidwall/redcon"
)

// client is one connection's state. Its scratch slices are reused from
// pipeline to pipeline so that a steady client allocates nothing per command.
type client struct {
	id      int64
	nc      *lockedConn // the connection
	rd      *reqParser  // reads nc's requests (parser.go)
	addr    string      // the client's address
	laddr   string
	created time.Time

	// Touched only by the connection's goroutine.
	proto  int
	authed bool
	quit   bool

	// drainGraces counts the reads a draining server allowed this
	// connection past its deadline (Server.drainGrace). Touched only by
	// the connection's goroutine.
	drainGraces int

	// mu guards the fields CLIENT LIST reads from other goroutines.
	mu         sync.Mutex
	name       string
	libName    string
	libVer     string
	lastCmd    string
	shownProto int   // proto, as CLIENT LIST shows it
	shownDB    uint8 // db, as CLIENT LIST shows it

	pending    []pending
	ops        []engine.Op
	limits     []engine.Limit  // RL.ALL's limits, which c.ops point into
	each       []engine.Result // room for RL.ALL's per-limit results, likewise
	rules      ruleCache       // the rules RL.ALL parsed last (layered.go)
	results    []engine.Result
	tracking   *tracking   // CLIENT TRACKING state; nil when off (tracking.go)
	cachingSet bool        // the command just dispatched was CLIENT CACHING
	multi      *multiState // the transaction being queued; nil outside one (multi.go)
	execing    bool        // EXEC is dispatching the queued commands
	readOnly   bool        // READONLY: reads are served here, not redirected (clustercmd.go)
	// watched are the keys WATCH registered, with their stamps (multi.go);
	// watchFull: more than maxWatchedKeys were watched, or a WATCH failed,
	// so the next EXEC fails.
	watched   []watchedKey
	watchFull bool
	// db is the connection's database (SELECT; databases.go).
	db uint8
	// endSegment ends the segment after the command just dispatched: a
	// WATCH, whose stamps its render records, and an EXEC whose SELECT may
	// be undone by its watch check (multi.go).
	endSegment bool

	local   replyBuf // replies rendered without the executor, in order
	out     replyBuf // the whole pipeline's replies
	tallies []tally  // the pipeline's counts per command (metrics.go)
}

// pending is one command of a pipeline on its way to a reply: either bytes
// already rendered into client.local, or a range of engine operations whose
// results its command renders once the batch has run.
type pending struct {
	cmd        *command
	proto      int
	opStart    int
	opEnd      int
	localStart int
	localEnd   int
	arg        int64 // a parse-time value the renderer needs (command specific)
	deferred   bool  // rendered by cmd.render after the batch ran
	stats      *cmdStats
	rlsPlan    *rls.Plan // RL.CHECK's matched request (rls.go)
	// owner is the connection, for the renders that change its state
	// (WATCH's); skipAfter is how many pendings after EXEC's belong to
	// its transaction, left unrendered when its watch check failed.
	owner     *client
	skipAfter int
	// prevDB is the connection's database before EXEC's queued SELECT
	// ran (dbChanged): a failed check restores it, as Redis never ran it.
	prevDB    uint8
	dbChanged bool
}

// enqueue adds an engine operation for the command being dispatched; its
// reply is rendered by the command's render function after the batch ran.
func (c *client) enqueue(p *pending, op engine.Op) {
	p.deferred = true
	op.DB = c.db
	if op.Code == engine.OpRateLimit {
		op.DB = 0 // the rate limit service's counters live in database 0
	}
	c.ops = append(c.ops, op)
}

// enqueueDB is enqueue of an op that names its database itself (SWAPDB).
func (c *client) enqueueDB(p *pending, op engine.Op) {
	p.deferred = true
	c.ops = append(c.ops, op)
}

// maxSegmentReply bounds the replies a segment of a pipeline renders before
// they are written: see runPipeline.
const maxSegmentReply = 256 << 10

// runPipeline runs a pipeline, normally as one segment: every command
// parsed, all their engine operations as one batch, every reply written in
// order in one write.
//
// A client that pipelines without reading must stall only itself, holding
// a bounded amount of the server's memory. The parser bounds the bytes of a
// pipeline, not its replies: 16 KiB of `COMMAND DOCS` renders 12 MB, and
// KEYS or a large SCAN COUNT as much as the keyspace. So a segment ends
// once its locally rendered replies pass maxSegmentReply, and after an
// operation whose result grows with the keyspace (KEYS, SCAN); its replies
// are written (blocking while the client does not read) before the next
// segment is parsed. Pipelines of limiter commands stay one segment.
func (s *Server) runPipeline(c *client, cmds []redcon.Command) {
	for len(cmds) > 0 {
		cmds = s.runSegment(c, cmds)
	}
}

// segmentFull reports whether the segment being parsed must end before the
// next command: its replies are large, or its last operation's reply grows
// with the keyspace (engine.OpCode.GrowsReply).
func segmentFull(c *client) bool {
	if len(c.local.b) >= maxSegmentReply || c.endSegment {
		return true
	}
	n := len(c.ops)
	return n > 0 && c.ops[n-1].Code.GrowsReply()
}

// runSegment runs the commands of cmds up to the end of a segment and
// returns the rest of the pipeline (nil when done or the connection is
// closing).
func (s *Server) runSegment(c *client, cmds []redcon.Command) (rest []redcon.Command) {
	start := time.Now()
	if c.tracking != nil {
		c.tracking.begin()
	}
	c.pending = c.pending[:0]
	c.ops = c.ops[:0]
	c.limits = c.limits[:0]
	c.each = c.each[:0]
	c.local.b = c.local.b[:0]
	c.endSegment = false
	for i, rc := range cmds {
		if c.quit {
			break
		}
		if i > 0 && segmentFull(c) {
			rest = cmds[i:]
			break
		}
		if c.multi != nil && len(rc.Args) > 0 {
			s.multiStep(c, rc.Args) // multi.go
			continue
		}
		c.pending = append(c.pending, pending{})
		p := &c.pending[len(c.pending)-1]
		s.dispatch(c, rc.Args, p)
	}
	if n := len(c.pending); n > 0 && c.pending[n-1].cmd != nil {
		c.mu.Lock()
		c.lastCmd = c.pending[n-1].cmd.name
		c.mu.Unlock()
	}

	var execErr error
	if len(c.ops) > 0 {
		if cap(c.results) < len(c.ops) {
			c.results = make([]engine.Result, len(c.ops))
		}
		c.results = c.results[:len(c.ops)]
		clear(c.results)
		execErr = s.exec.Execute(context.Background(), c.ops, c.results)
	}

	c.out.b = c.out.b[:0]
	skip := 0 // replies of a transaction whose watch check failed
	for i := range c.pending {
		p := &c.pending[i]
		if skip > 0 {
			skip--
			continue
		}
		cmdErr := execErr
		if cmdErr == nil && p.deferred {
			cmdErr = groupFailure(c.results[p.opStart:p.opEnd])
		}
		c.count(p, cmdErr)
		if !p.deferred {
			c.out.b = append(c.out.b, c.local.b[p.localStart:p.localEnd]...)
			continue
		}
		c.out.proto = p.proto
		if cmdErr != nil {
			if !p.cmd.flags.has(flagLoading) {
				c.out.Error(errorText(cmdErr))
				if p.owner != nil && p.cmd.name == "watch" {
					p.owner.watchFull = true // a WATCH that failed
				}
				if p.skipAfter > 0 { // EXEC's check failed to run: one reply
					skip = p.skipAfter
					p.undoTx()
				}
				continue
			}
			for i := p.opStart; i < p.opEnd; i++ {
				c.results[i].Err = cmdErr
			}
		}
		p.cmd.render(s, &c.out, p, c.results[p.opStart:p.opEnd])
		if p.skipAfter > 0 && p.arg == execAborted {
			skip = p.skipAfter
			p.undoTx()
		}
	}
	// The metrics count the segment before its replies leave: a client
	// that has its reply finds its commands counted (INFO commandstats,
	// /metrics), as in Redis.
	s.flushTallies(c, time.Since(start))
	// One write per segment; CLIENT TRACKING's pushes, written by other
	// goroutines, fall between writes (lockedConn.Write), so after these
	// replies when tracking.end sends them.
	if len(c.out.b) > 0 {
		if _, err := c.nc.Write(c.out.b); err != nil {
			rest = nil
			c.quit = true
		}
	}
	if c.tracking != nil {
		c.tracking.end(c.ownChange)
	}
	// Keys and patterns point into the request buffer (or MULTI's
	// copies): drop them so the scratch slices do not pin old pipelines.
	clear(c.ops)
	clear(c.limits)
	clear(c.each)
	// Do not let one huge pipeline pin megabytes per idle connection.
	const keep = 64 << 10
	if cap(c.out.b) > keep {
		c.out.b = nil
	}
	if cap(c.local.b) > keep {
		c.local.b = nil
	}
	if cap(c.ops) > 4096 {
		c.ops, c.results, c.pending = nil, nil, nil
	}
	if cap(c.limits) > 4096 {
		c.limits, c.each = nil, nil
	}
	return rest
}

// dispatch looks a command up, checks arity and authentication, and lets it
// either render a local reply or queue engine operations.
func (s *Server) dispatch(c *client, args [][]byte, p *pending) {
	var cmd *command
	if len(args) > 0 {
		cmd = s.lookup(args[0])
	}
	s.dispatchCmd(c, cmd, args, p)
}

// dispatchCmd is dispatch of args whose command was looked up already
// (nil: unknown), as a script's nested commands are.
func (s *Server) dispatchCmd(c *client, cmd *command, args [][]byte, p *pending) {
	c.local.proto = c.proto
	p.proto = c.proto
	p.localStart = len(c.local.b)
	p.opStart = len(c.ops)
	defer func() {
		p.localEnd = len(c.local.b)
		p.opEnd = len(c.ops)
	}()
	if len(args) == 0 {
		return
	}
	if cmd == nil {
		p.stats = s.metrics.other
		c.local.Error(unknownCommand(args))
		return
	}
	p.stats = cmd.stats
	if !c.authed && !cmd.flags.has(flagNoAuth) {
		c.local.Error(msgNoAuth.Text())
		return
	}
	if !cmd.arityOK(len(args)) {
		c.local.Error(msgArity.Text(cmd.name))
		return
	}
	if s.clusterOn && (cmd.firstKey > 0 || cmd.keysOf != nil) && !c.execing {
		if msg := s.clusterRoute(cmd, args, c.readOnly); msg != "" { // clustercmd.go
			c.local.Error(msg)
			return
		}
	}
	p.cmd = cmd
	cmd.run(s, c, args, p)
	if c.tracking != nil {
		c.afterCommand(p, args)
	}
}

// ownChange reports whether the segment just run has an operation that may
// change key (NOLOOP's filter): a mutating op naming it in the fields its
// row of the engine's table of operations says name keys.
func (c *client) ownChange(key string) bool {
	for i := range c.ops {
		op := &c.ops[i]
		if !op.Code.Mutates() {
			continue
		}
		switch op.Code.Keys() {
		case engine.KeysKey:
			if string(op.Key) == key {
				return true
			}
		case engine.KeysAll:
			for j := range op.All {
				if string(op.All[j].Key) == key {
					return true
				}
			}
		}
	}
	return false
}

// lookup finds a command by case-insensitive name without allocating.
func (s *Server) lookup(name []byte) *command {
	var buf [32]byte
	if len(name) > len(buf) {
		return nil
	}
	for i, ch := range name {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		buf[i] = ch
	}
	return s.commands[string(buf[:len(name)])]
}

// unknownCommand renders Redis's unknown-command error text.
func unknownCommand(args [][]byte) string {
	msg := msgUnknownCommand.Text(printable(args[0], 128), "")
	for _, a := range args[1:] {
		if len(msg) > 256 {
			break
		}
		msg += "'" + printable(a, 128-min(len(msg), 128)) + "' "
	}
	return msg
}

// printable returns at most max bytes of b with control and non-ASCII bytes
// replaced, for quoting client input in an error reply.
func printable(b []byte, max int) string {
	if max < 0 {
		max = 0
	}
	if len(b) > max {
		b = b[:max]
	}
	out := make([]byte, len(b))
	for i, ch := range b {
		if ch < 0x20 || ch >= 0x7f {
			ch = '?'
		}
		out[i] = ch
	}
	return string(out)
}

// groupFailure returns the first error among a command's results that is
// about its Raft group's batch rather than the operation's own outcome
// (not applied: CLUSTERDOWN, LOADING, shutting down; or UNCERTAIN): on a
// node with several groups, one group's batch can fail while the others
// run, and its operations carry the failure (cluster.Host.Execute). The
// command then replies that error, whatever its own reply would be.
func groupFailure(results []engine.Result) error {
	for i := range results {
		if err := results[i].Err; err != nil {
			if e := errcode.Of(err); e != nil && isBatchFailure(e.Code) {
				return err
			}
		}
	}
	return nil
}

// isBatchFailure reports whether c is about a batch's fate, not one
// operation's outcome.
func isBatchFailure(c errcode.Code) bool {
	return c.Class() == errcode.Unavailable || c.Class() == errcode.MayHaveApplied
}
