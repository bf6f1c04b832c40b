package engine

import (
	"errors"
)

// Databases (SELECT; docs/design.md, "Databases"). A key is one key per
// database: Op.DB says which. The engine of database 0 is the top one: it
// holds the clock and the other databases, each an engine of its own
// (its stripes, its sweep cursor) created on first use and sharing the
// top's limits and memory totals (--max-keys and --maxmemory count every
// database), its Watcher and its WATCH table. Database 0 runs exactly the
// path it ran before databases: Apply hands a run of ops of another
// database to that database's engine at the same instant, and runs the
// ops that span databases itself (topOnly).

// NumDBs is the number of databases (0..NumDBs-1), as redis-server's
// default.
const NumDBs = 16

// Operation codes of the databases (120..139 with WATCH's; cluster version 3).
const (
	// OpFlushDB forgets every key of DB (FLUSHDB); Result.Count is how
	// many existed. OpFlush forgets those of every database (FLUSHALL).
	OpFlushDB OpCode = 122
	// OpSwapDB swaps databases DB and Count (SWAPDB): each one's keys are
	// the other's from then on.
	OpSwapDB OpCode = 123
	// OpMove moves Key from database DB to database Count (MOVE):
	// Result.Count is 1 when moved, 0 when the key is absent from DB or
	// present in database Count. Its state, expiry included, goes as it is.
	OpMove OpCode = 124
)

// The algorithms of the database ops (their rows in ops.go).
func (e *Engine) opFlushDB(_, now int64, _ *Op, res *Result) { *res = Result{Count: e.flush(now)} }
func (e *Engine) opSwapDB(_, now int64, op *Op, res *Result) {
	*res = Result{Err: e.swapDB(now, op.DB, op.Count)}
}
func (e *Engine) opMove(_, now int64, op *Op, res *Result) { *res = e.move(now, op) }

// errBadDB: an op names a database beyond NumDBs (the server checks first).
var errBadDB = badRule("database index out of range")

// errSameDB: MOVE within one database (the server checks first).
var errSameDB = errors.New("engine: MOVE to the same database")

// topOnly reports whether the top engine runs op whatever its DB: the
// clock ops and those spanning databases.
func topOnly(c OpCode) bool {
	switch c {
	case OpTimeWarp, OpClockFreeze, OpClockResume, OpTime, OpFlush, OpWatchCheck, OpSwapDB, OpMove,
		OpEval, OpEvalSha, OpScriptLoad, OpScriptExists, OpScriptFlush: // one script cache (scripts.go)
		return true
	}
	return false
}

// db returns database n's engine, creating it on first use; nil for n
// beyond NumDBs. Called on the top engine.
func (e *Engine) db(n uint8) *Engine {
	if n == 0 {
		return e
	}
	if int(n) >= NumDBs {
		return nil
	}
	if d := e.dbs[n].Load(); d != nil {
		return d
	}
	d := e.sharing(make([]*stripe, len(e.stripes)))
	d.top = e
	d.initStripes(n)
	if e.dbs[n].CompareAndSwap(nil, d) {
		return d
	}
	return e.dbs[n].Load()
}

// sharing returns an engine over stripes with e's bounds, its totals and
// its watch tables: a database's engine (db) or a script's view of e
// (scriptView), which set the rest.
func (e *Engine) sharing(stripes []*stripe) *Engine {
	return &Engine{
		stripes:  stripes,
		mask:     e.mask,
		maxLog:   e.maxLog,
		maxValue: e.maxValue,
		maxColl:  e.maxColl,
		tot:      e.tot,
		watch:    e.watch,
		wt:       e.wt,
	}
}

// eachDB calls fn on every database created so far, in order. Called on
// the top engine.
func (e *Engine) eachDB(fn func(d *Engine)) {
	if e.dbs == nil {
		fn(e)
		return
	}
	for i := range e.dbs {
		if d := e.dbs[i].Load(); d != nil {
			fn(d)
		}
	}
}

// eachStripeAll is eachStripe over every database.
func (e *Engine) eachStripeAll(fn func(s *stripe)) {
	e.eachDB(func(d *Engine) { d.eachStripe(fn) })
}

// flushAll is OpFlush: every database's keys go.
func (e *Engine) flushAll(now int64) int64 {
	n := int64(0)
	e.eachDB(func(d *Engine) { n += d.flush(now) })
	return n
}

// swapDB is OpSwapDB: the stripes of a and b exchange their contents,
// stripe by stripe, each pair locked in database order.
func (e *Engine) swapDB(now int64, a uint8, b int64) error {
	if b < 0 || b >= NumDBs || int(a) >= NumDBs {
		return errBadDB
	}
	if int64(a) == b {
		return nil
	}
	lo, hi := min(a, uint8(b)), max(a, uint8(b))
	x, y := e.db(lo), e.db(hi)
	// The watched keys of either database that exist in either change
	// (Redis's touchAllWatchedKeysInDb).
	var touched [][]byte
	if e.wt.active() {
		for _, k := range append(e.wt.keysOf(lo), e.wt.keysOf(hi)...) {
			if x.inspect(now, OpExists, k).Count == 1 || y.inspect(now, OpExists, k).Count == 1 {
				touched = append(touched, k)
			}
		}
	}
	for i := range x.stripes {
		s, o := x.stripes[i], y.stripes[i]
		x.lk(s)
		y.lk(o)
		s.swapState(o)
		y.unlk(o)
		x.unlk(s)
	}
	if e.watch != nil {
		e.watch.AllChanged()
	}
	for _, k := range touched {
		e.wt.bump(lo, k)
		e.wt.bump(hi, k)
	}
	return nil
}

// swapState exchanges the keys of s and o (of two databases; both locked).
// Each keeps its lock, its database and the engine's shared pointers.
func (s *stripe) swapState(o *stripe) {
	sc, oc := s.count.Load(), o.count.Load()
	s.count.Store(oc)
	o.count.Store(sc)
	s.accKeys, o.accKeys = o.accKeys, s.accKeys
	s.accBytes, o.accBytes = o.accBytes, s.accBytes
	s.reclaimedAt, o.reclaimedAt = o.reclaimedAt, s.reclaimedAt
	s.pages, o.pages = o.pages, s.pages
	s.meta, o.meta = o.meta, s.meta
	s.avail, o.avail = o.avail, s.avail
	s.slots, o.slots = o.slots, s.slots
	s.capBits, o.capBits = o.capBits, s.capBits
	s.ib, o.ib = o.ib, s.ib
	s.arena, o.arena = o.arena, s.arena
	s.rules, o.rules = o.rules, s.rules
	s.logs, o.logs = o.logs, s.logs
	s.leases, o.leases = o.leases, s.leases
	s.strs, o.strs = o.strs, s.strs
}

// move is OpMove.
func (e *Engine) move(now int64, op *Op) Result {
	if op.Count < 0 || op.Count >= NumDBs || int(op.DB) >= NumDBs {
		return Result{Err: errBadDB}
	}
	if int64(op.DB) == op.Count {
		return Result{Err: errSameDB}
	}
	src, dst := e.db(op.DB), e.db(uint8(op.Count))
	rec, ok := src.exportKey(op.Key, now)
	if !ok || dst.live(now, 0, op.Key) {
		return Result{}
	}
	rec.DB = uint8(op.Count)
	if err := dst.importRecord(rec); err != nil {
		return Result{Err: err}
	}
	src.delete(now, op.Key)
	e.wt.bump(op.DB, op.Key)
	e.wt.bump(uint8(op.Count), op.Key)
	if e.watch != nil {
		e.watch.KeyChanged(op.Key)
	}
	return Result{Count: 1}
}
