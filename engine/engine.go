package engine

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// Engine holds every key's limiter state and the decision clock.
//
// Locking. Keys are spread over a power-of-two number of stripes by the low
// bits of their xxhash; each stripe has one mutex guarding everything in it.
// The lock order: a goroutine holds at most one stripe lock at a time, except
// RL.ALL (OpAll, all.go), which holds the locks of every stripe its keys fall
// in at once, taken in ascending stripe index, each once, so that its limits
// are evaluated and charged at one instant; since every holder of several
// stripe locks takes them in that one order, no two can deadlock. Nothing
// takes the clock's mutex (taken only by the clock operations) while holding
// a stripe lock. Operations that span stripes (SCAN, KEYS, FLUSHALL, Sweep,
// Reset, Len) visit them one at a time, so they are not atomic snapshots of
// the whole engine. The decide path takes no global lock: the clock is
// lock-free for readers (see clock). The Watcher (Config.Watcher) is called
// with or without a stripe lock held, and so sits below the stripe locks in
// the order: it takes only a leaf lock of its own and never calls into the
// engine.
//
// Memory. A key of up to 19 bytes costs about 58 bytes: a 48-byte
// pointer-free entry in a paged slab holding the state words, an interned rule
// id and the key itself, plus a uint32 hash slot; longer keys add their bytes
// in a paged arena. A lookup of an existing key touches one hash slot and one
// entry. See slab.go, table.go, arena.go and rules.go.
type Engine struct {
	stripes []*stripe
	mask    uint64
	maxLog  int64
	// maxValue is Config.MaxValueLen (strings.go).
	maxValue int
	// maxColl is Config.MaxCollectionLen (colls.go).
	maxColl int
	clock   clock
	sweep   sweepCursor
	tot     *totals     // nil without limits (memory.go)
	watch   Watcher     // nil unless Config.Watcher is set
	wt      *watchTable // WATCH's registrations (watch.go), the top's
	// top is the engine of database 0, which holds the clock and the
	// other databases (databases.go); itself on that engine.
	top *Engine
	// dbs are the databases, created on first use (dbs[0] is top); nil
	// on the engine of another database.
	dbs *[NumDBs]atomic.Pointer[Engine]
	// Scripts (scripts.go, scripttx.go): the runner, the loaded scripts, nolock (set
	// only on a script's view of the engine), the tx of a script's view
	// (which takes the stripes its ops reach) and the idle txs. Scripts run
	// on the top engine (topOnly: one script cache for every database)
	// over their database's engine, whose txs they take.
	runner  ScriptRunner
	scripts scriptCache
	nolock  bool
	tx      *ScriptTx
	txs     sync.Pool
}

const (
	// DefaultStripes is the number of stripes when Config.Stripes is 0.
	DefaultStripes = 256
	// DefaultMaxLogLimit is RL.LOG's largest limit when Config.MaxLogLimit
	// is 0 (the server's --max-log-limit default).
	DefaultMaxLogLimit = 100000
	// maxStripes caps Config.Stripes.
	maxStripes = 1 << 16
)

// New returns an empty engine whose clock runs at wall time.
func New(cfg Config) *Engine {
	n := cfg.Stripes
	if n <= 0 {
		n = DefaultStripes
	}
	n = min(1<<bits.Len(uint(n-1)), maxStripes)
	e := &Engine{
		stripes: make([]*stripe, n),
		mask:    uint64(n - 1),
		maxLog:  cfg.MaxLogLimit,
		watch:   cfg.Watcher,
	}
	if e.maxLog <= 0 {
		e.maxLog = DefaultMaxLogLimit
	}
	e.maxValue = cfg.MaxValueLen
	if e.maxValue <= 0 {
		e.maxValue = DefaultMaxValueLen
	}
	e.maxValue = min(e.maxValue, maxValueLenCap)
	e.maxColl = cfg.MaxCollectionLen
	if e.maxColl <= 0 {
		e.maxColl = DefaultMaxCollectionLen
	}
	if cfg.MaxKeys > 0 || cfg.MaxBytes > 0 {
		e.tot = &totals{maxKeys: max(cfg.MaxKeys, 0), maxBytes: max(cfg.MaxBytes, 0)}
		e.tot.errKeys = &errcode.Error{Code: errcode.KeyLimit, Num: e.tot.maxKeys}
	}
	e.wt = &watchTable{}
	e.top = e
	e.dbs = &[NumDBs]atomic.Pointer[Engine]{}
	e.dbs[0].Store(e)
	e.initStripes(0)
	e.runner = cfg.Scripts
	e.scripts.maxCount, e.scripts.maxBytes = cfg.ScriptCacheMax, cfg.ScriptCacheBytes
	if e.scripts.maxCount <= 0 {
		e.scripts.maxCount = DefaultScriptCacheMax
	}
	if e.scripts.maxBytes <= 0 {
		e.scripts.maxBytes = DefaultScriptCacheBytes
	}
	e.clock.init()
	return e
}

// initStripes creates the stripes of database db.
func (e *Engine) initStripes(db uint8) {
	for i := range e.stripes {
		e.stripes[i] = newStripe(e.tot)
		e.stripes[i].idx = i
		e.stripes[i].watch = e.watch
		e.stripes[i].wt = e.wt
		e.stripes[i].db = db
	}
}

// NumStripes returns the number of stripes (a power of two).
func (e *Engine) NumStripes() int { return len(e.stripes) }

// Len is the number of keys with state, in O(stripes). Keys back at their
// initial state but not yet reclaimed by an access or Sweep are counted; the
// exact count at a given time (DBSIZE, OpCount) is e.count.
func (e *Engine) Len() int {
	n := int64(0)
	e.eachDB(func(d *Engine) {
		for _, s := range d.stripes {
			n += s.count.Load()
		}
	})
	return int(n)
}

// Reset forgets every key. The clock is kept.
func (e *Engine) Reset() {
	e.eachStripeAll(func(s *stripe) { s.reset() })
	e.wt.reset()
	if e.watch != nil {
		e.watch.AllChanged()
	}
}

// Now returns the clock's time for wall without running any operation (for
// TIME). It never returns less than a time already handed out, but does not
// record what it returns, so reads cannot change replicated state.
func (e *Engine) Now(wall int64) int64 { return e.clock.peek(wall) }

// ClockState returns the clock's replicated state (for snapshots).
func (e *Engine) ClockState() ClockState { return e.clock.state() }

// SetClockState replaces the clock's state (on snapshot restore).
func (e *Engine) SetClockState(cs ClockState) { e.clock.setState(cs) }

// Decide runs one OpDecide at time now, without the clock. It does not
// allocate when key already has state.
func (e *Engine) Decide(now int64, key []byte, rule Rule, cost int64) Result {
	var res Result
	e.decideHashed(now, xxhash.Sum64(key), key, rule, cost, &res)
	return res
}

// decideHashed is Decide, its result written to *res, with the key's
// xxhash h computed; the rule is not yet checked.
func (e *Engine) decideHashed(now int64, h uint64, key []byte, rule Rule, cost int64, res *Result) {
	if err := e.checkRule(rule, cost); err != nil {
		*res = Result{Err: err}
		return
	}
	if rule.Kind == KindConcurrency {
		*res = Result{Err: errNeedsToken}
		return
	}
	s := e.stripes[h&e.mask]
	e.lk(s)
	s.decide(now, hiHash(h), key, rule, cost, res)
	e.unlk(s)
	if res.Err == errNoRoom {
		e.decideFull(now, h, key, rule, cost, res)
	}
}

// lookAhead is how many consecutive decisions Apply looks up before it
// decides the first of them.
const lookAhead = 32

// decideRun runs a run of at most lookAhead OpDecide ops at now. A lookup
// of a key among millions misses the cache twice, on its index slot and
// then on its entry, and a decision waits for both. So the run is looked up
// first, in two passes whose iterations do not depend on each other and
// branch on nothing that is not yet in cache: the index slots of every key,
// then their entries. The CPU has the misses of many keys in flight at once,
// and the decisions that follow find their slots and entries in cache. The
// look-up changes nothing: the outcome is that of deciding each op in turn.
func (e *Engine) decideRun(now int64, ops []Op, results []Result) {
	var hashes [lookAhead]uint64
	var sink uint32
	for i := range ops {
		h := xxhash.Sum64(ops[i].Key)
		hashes[i] = h
		s := e.stripes[h&e.mask]
		e.lk(s)
		sink += s.touchSlot(hiHash(h))
		e.unlk(s)
	}
	for _, h := range hashes[:len(ops)] {
		s := e.stripes[h&e.mask]
		e.lk(s)
		sink += s.touchEntry(hiHash(h))
		e.unlk(s)
	}
	// The loaded words stay in a register until here: a store of one
	// before the next lock would make that lock wait for the miss. The
	// results are overwritten below; storing sink keeps the loads.
	results[0].Count = int64(sink)
	for i := range ops {
		op := &ops[i]
		e.decideHashed(now, hashes[i], op.Key, op.Rule, op.Cost, &results[i])
	}
}

// Apply runs ops in order. It first advances the clock with wall time wall
// (nanoseconds since the epoch); every op runs at the clock's time, and the
// clock operations in the batch change it for the ops after them.
// results[i] receives the outcome of ops[i]; results must be at least as
// long as ops. Apply is safe for concurrent use.
func (e *Engine) Apply(wall int64, ops []Op, results []Result) {
	e.run(wall, e.clock.now(wall), ops, results[:len(ops)])
}

// run runs ops at now (Apply's loop): on the top engine, a run of ops of
// another database goes to that database's engine, except the ops only
// the top runs (topOnly); there the clock ops move now.
func (e *Engine) run(wall, now int64, ops []Op, results []Result) {
	for i := 0; i < len(ops); i++ {
		op := &ops[i]
		if op.DB != 0 && e.dbs != nil && !topOnly(op.Code) {
			// A run of another database's ops: its engine runs them.
			j := i + 1
			for j < len(ops) && ops[j].DB == op.DB && !topOnly(ops[j].Code) {
				j++
			}
			if d := e.db(op.DB); d != nil {
				d.run(wall, now, ops[i:j], results[i:j])
			} else {
				for k := i; k < j; k++ {
					results[k] = Result{Err: errBadDB}
				}
			}
			i = j - 1
			continue
		}
		if op.Code == OpDecide || op.Code == OpAll {
			j := i + 1
			for j < len(ops) && j-i < lookAhead && ops[j].Code == op.Code {
				j++
			}
			if j-i > 1 {
				if op.Code == OpDecide {
					e.decideRun(now, ops[i:j], results[i:j])
				} else {
					e.allRun(now, ops[i:j], results[i:j])
				}
				if e.watch != nil {
					e.notify(ops[i:j])
				}
				if e.wt.active() {
					e.watchBump(ops[i:j], results[i:j])
				}
				i = j - 1
				continue
			}
		}
		if op.Code == OpWatchCheck {
			if e.opWatchCheck(wall, now, op, &results[i]); results[i].Count == 0 {
				// A watched key changed: the transaction's ops after the
				// check are skipped, on every replica alike.
				skip := int(min(max(op.Count, 0), int64(len(ops)-i-1)))
				for k := 1; k <= skip; k++ {
					results[i+k] = Result{}
				}
				i += skip
			}
			continue
		}
		row := &opRows[op.Code]
		if row.apply != nil {
			row.apply(e, wall, now, op, &results[i])
			if row.clock {
				now = e.clock.now(wall)
			}
		} else {
			results[i] = Result{Err: badRule("unknown operation code %d", op.Code)}
		}
		if e.watch != nil {
			e.notify(ops[i : i+1])
		}
		if e.wt.active() {
			e.watchBump(ops[i:i+1], results[i:i+1])
		}
	}
}

// The algorithms of the operations of this file's, as the table of
// operations (ops.go) names them.

func (e *Engine) opDecide(_, now int64, op *Op, res *Result) {
	e.decideHashed(now, xxhash.Sum64(op.Key), op.Key, op.Rule, op.Cost, res)
}
func (e *Engine) opPeek(_, now int64, op *Op, res *Result) { *res = e.peek(now, op.Key) }
func (e *Engine) opDelete(_, now int64, op *Op, res *Result) {
	*res = Result{Count: e.delete(now, op.Key)}
}
func (e *Engine) opInspect(_, now int64, op *Op, res *Result) {
	*res = e.inspect(now, op.Code, op.Key)
}
func (e *Engine) opCount(_, now int64, _ *Op, res *Result) { *res = Result{Count: e.count(now)} }
func (e *Engine) opScan(_, now int64, op *Op, res *Result) { *res = e.scan(now, op) }
func (e *Engine) opKeys(_, now int64, op *Op, res *Result) {
	*res = Result{Keys: e.keys(now, op.Pattern)}
}
func (e *Engine) opFlush(_, now int64, _ *Op, res *Result) { *res = Result{Count: e.flushAll(now)} }
func (e *Engine) opTime(_, now int64, _ *Op, res *Result)  { *res = Result{Time: now} }
func (e *Engine) opAll(_, now int64, op *Op, res *Result) {
	e.allHashed(now, op.All, nil, op.Each, false, res)
}
func (e *Engine) opRateLimit(_, now int64, op *Op, res *Result) {
	*res = e.rateLimit(now, op.All, op.Shadow, op.Each)
}
func (e *Engine) opAcquire(_, now int64, op *Op, res *Result) { *res = e.acquireOp(now, op) }
func (e *Engine) opRelease(_, now int64, op *Op, res *Result) {
	*res = e.release(now, op.Key, op.Token)
}

// opTimeWarp, opClockFreeze and opClockResume move the clock (their rows
// say so: Apply reads it again after them). The string keys a jump
// expired go at once (strstore.go).
func (e *Engine) opTimeWarp(wall, _ int64, op *Op, res *Result) {
	err := e.clock.warp(wall, op.Clock)
	// The string keys the jump expired go now (strstore.go), in every
	// database.
	now := e.countedAt(e.clock.now(wall))
	e.eachDB(func(d *Engine) { d.drainExpired(now) })
	*res = Result{Err: err}
}

func (e *Engine) opClockFreeze(wall, _ int64, op *Op, res *Result) {
	err := e.clock.freeze(wall, op.Clock)
	now := e.countedAt(e.clock.now(wall)) // a freeze may jump ahead
	e.eachDB(func(d *Engine) { d.drainExpired(now) })
	*res = Result{Err: err}
}

func (e *Engine) opClockResume(wall, _ int64, _ *Op, res *Result) {
	e.clock.resume(wall)
	*res = Result{}
}

// notify tells the watcher of the keys ops may have changed: those of a
// mutating operation, in the fields its row's Keys names (ops.go), except
// a decision or acquire at cost 0 (which changes nothing; a reclaim it
// makes is reported by stripe.remove) and a limit of RL.ALL or a rate limit
// request with cost 0 (which never stores anything).
func (e *Engine) notify(ops []Op) {
	for i := range ops {
		op := &ops[i]
		if !op.Code.Mutates() || op.Code == OpWatch || op.Code == OpWatchCheck {
			continue
		}
		switch op.Code.Keys() {
		case KeysEvery:
			e.watch.AllChanged()
		case KeysAll:
			for j := range op.All {
				if op.All[j].Cost != 0 {
					e.watch.KeyChanged(op.All[j].Key)
				}
			}
		case KeysKey:
			if op.Key != nil && (op.Cost != 0 || op.Code != OpDecide && op.Code != OpAcquire) {
				e.watch.KeyChanged(op.Key)
			}
		}
	}
}

// lock returns key's hash and its stripe, locked.
func (e *Engine) lock(key []byte) (uint32, *stripe) {
	h := xxhash.Sum64(key)
	s := e.stripes[h&e.mask]
	e.lk(s)
	return hiHash(h), s
}

// peek is OpPeek: the key's own rule with cost 0.
func (e *Engine) peek(now int64, key []byte) Result {
	hi, s := e.lock(key)
	defer e.unlk(s)
	_, idx, ok := s.find(hi, key)
	if !ok {
		return Result{}
	}
	if ent := s.entry(idx); isValueKind(s.rules.get(ent.rule).Kind) {
		if strLive(ent, now) {
			return Result{Err: ErrWrongType}
		}
		return Result{}
	}
	var res Result
	if !s.decide(now, hi, key, s.rules.get(s.entry(idx).rule), 0, &res) {
		return Result{}
	}
	return res
}

// delete forgets key and returns 1 if it had state at now, else 0.
func (e *Engine) delete(now int64, key []byte) int64 {
	hi, s := e.lock(key)
	defer e.unlk(s)
	pos, idx, ok := s.find(hi, key)
	if !ok {
		return 0
	}
	_, _, _, live := s.liveState(s.entry(idx), now)
	s.remove(pos, idx)
	if live {
		return 1
	}
	return 0
}

// inspect answers OpExists, OpType and OpTTL without changing anything.
func (e *Engine) inspect(now int64, code OpCode, key []byte) Result {
	hi, s := e.lock(key)
	defer e.unlk(s)
	var r Result
	var live bool
	var st state
	var rule Rule
	var t int64
	var ent *entry
	if _, idx, ok := s.find(hi, key); ok {
		ent = s.entry(idx)
		st, rule, t, live = s.liveState(ent, now)
	}
	switch {
	case code == OpExists && live:
		r.Count = 1
	case code == OpType && live:
		r.Kind = rule.Kind
	case code == OpTTL && !live:
		r.TTL = -2
	case code == OpTTL && kinds[rule.Kind].shape == inLog:
		r.TTL = s.logTTL(ent, rule, now)
	case code == OpTTL && isValueKind(rule.Kind) && ent.a == 0:
		r.TTL = -1
	case code == OpTTL && isValueKind(rule.Kind):
		// In milliseconds, as Redis counts (an expiry may lie beyond
		// what nanoseconds hold): Result.Kind says so.
		r.Kind, r.TTL = rule.Kind, ent.a-now/1e6
	case code == OpTTL && kinds[rule.Kind].shape == inLeases:
		r.TTL = s.leaseTTL(ent, now)
	case code == OpTTL:
		r.TTL = satAdd(ttl(&st, rule, t), t-now)
	}
	return r
}
