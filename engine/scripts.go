package engine

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"slices"
	"sort"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// Scripts (SPEC section 14). The engine knows no Lua: it keeps the loaded
// scripts (replicated state: the cache below, in snapshots and the digest)
// and, for OpEval and OpEvalSha, hands a ScriptTx to the ScriptRunner of
// its Config, which runs the script and applies the script's commands
// through the tx at the op's time. The tx holds every stripe lock for the
// whole run (taken in ascending index, as RL.ALL takes its stripes), so
// nothing interleaves with a script even on an engine applied to
// concurrently (the in-memory executor); its nested ops run on a view of
// the engine that takes no lock. Before a nested op changes a key, the tx
// keeps the key's record as it was, so a run the runner aborts (a script
// stopped by its budget) is undone; a script that fails otherwise keeps
// its writes, as in Redis.

// Operation codes of scripts (50..59 are reserved for them) and RENAME.
const (
	// OpRename renames Key to Args[0] (RENAME; RENAMENX with Flags
	// RenameNX). Result.Count is 1 when renamed, 0 when RENAMENX found
	// the new key present. A missing Key fails with errcode.NoSuchKey.
	OpRename OpCode = 30
	// OpEval runs the script Value (EVAL): Args holds its keys then its
	// arguments, NumKeys how many of Args are keys, Key its first key
	// (routing), Flags the Script* flags. The script is added to the
	// script cache first. Result.Value is the script's reply, rendered by
	// the runner as RESP bytes for the client's protocol.
	OpEval OpCode = 50
	// OpEvalSha is OpEval of the cached script whose SHA1 is Value (40 hex
	// digits, either case); errcode.NoScript when it is not cached.
	OpEvalSha OpCode = 51
	// OpScriptLoad adds the script Value to the cache (SCRIPT LOAD);
	// Result.Value is its SHA1 in lower-case hex.
	OpScriptLoad OpCode = 52
	// OpScriptExists sets Result.Values[i] to "1" when the script whose
	// SHA1 is Args[i] is cached, else "0" (SCRIPT EXISTS).
	OpScriptExists OpCode = 53
	// OpScriptFlush empties the cache (SCRIPT FLUSH); Result.Count is the
	// number of scripts it held.
	OpScriptFlush OpCode = 54
)

// Flags of OpRename, OpEval and OpEvalSha.
const (
	// RenameNX: RENAMENX (do nothing when the new key exists).
	RenameNX = 1 << 0
	// ScriptRESP3: the calling client speaks RESP3.
	ScriptRESP3 = 1 << 0
	// ScriptReadOnly: EVAL_RO, EVALSHA_RO (a write inside is refused).
	ScriptReadOnly = 1 << 1
)

// ScriptRunner runs scripts for the engine (resp's, over gopher-lua). It
// must be deterministic: the same script, keys, arguments, state and time
// give the same reply and the same nested ops on every replica.
type ScriptRunner interface {
	// RunScript runs tx's script and returns its reply as RESP bytes. It
	// applies the script's commands with tx.Apply and calls tx.Abort when
	// the script's writes must be undone (its budget ran out).
	RunScript(tx *ScriptTx) []byte
}

// Default bounds of the script cache (Config.ScriptCacheMax and
// ScriptCacheBytes when 0).
const (
	DefaultScriptCacheMax   = 10000
	DefaultScriptCacheBytes = 64 << 20
)

// scriptCache holds the loaded scripts by SHA1. Its mutex is a leaf: taken
// with no stripe lock held, nothing is called under it.
type scriptCache struct {
	mu       sync.Mutex
	bodies   map[[sha1.Size]byte][]byte
	bytes    int64
	maxCount int64
	maxBytes int64
}

// ScriptSHA returns body's SHA1 in lower-case hex, as SCRIPT LOAD replies.
func ScriptSHA(body []byte) string {
	sum := sha1.Sum(body)
	return hex.EncodeToString(sum[:])
}

// parseSHA reads a 40-digit hex SHA1 in either case.
func parseSHA(s []byte) (sum [sha1.Size]byte, ok bool) {
	if len(s) != 2*sha1.Size {
		return sum, false
	}
	var lower [2 * sha1.Size]byte
	for i, c := range s {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	_, err := hex.Decode(sum[:], lower[:])
	return sum, err == nil
}

// add caches body (a copy) unless present and returns its SHA1, or the
// error of a full cache.
func (c *scriptCache) add(body []byte) ([sha1.Size]byte, error) {
	sum := sha1.Sum(body)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.bodies[sum]; ok {
		return sum, nil
	}
	if int64(len(c.bodies)) >= c.maxCount || c.bytes+int64(len(body)) > c.maxBytes {
		return sum, &errcode.Error{Code: errcode.ScriptCacheFull, Num: c.maxCount, Detail: itoa(c.maxBytes)}
	}
	if c.bodies == nil {
		c.bodies = make(map[[sha1.Size]byte][]byte)
	}
	c.bodies[sum] = slices.Clone(body)
	c.bytes += int64(len(body))
	return sum, nil
}

func (c *scriptCache) get(sum [sha1.Size]byte) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.bodies[sum]
	return b, ok
}

// sorted returns the cached bodies in the order of their SHA1s.
func (c *scriptCache) sorted() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	sums := make([][sha1.Size]byte, 0, len(c.bodies))
	for s := range c.bodies {
		sums = append(sums, s)
	}
	sort.Slice(sums, func(i, j int) bool { return bytes.Compare(sums[i][:], sums[j][:]) < 0 })
	out := make([][]byte, len(sums))
	for i, s := range sums {
		out[i] = c.bodies[s]
	}
	return out
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// Scripts returns the cached scripts' bodies in SHA1 order (for snapshots);
// the caller must not change them.
func (e *Engine) Scripts() [][]byte { return e.scripts.sorted() }

// LoadScripts replaces the script cache by bodies (on snapshot restore),
// beyond the cache's bounds if need be: a snapshot holds what the log
// admitted.
func (e *Engine) LoadScripts(bodies [][]byte) {
	c := &e.scripts
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bodies, c.bytes = nil, 0
	for _, b := range bodies {
		if c.bodies == nil {
			c.bodies = make(map[[sha1.Size]byte][]byte)
		}
		sum := sha1.Sum(b)
		if _, ok := c.bodies[sum]; !ok {
			c.bodies[sum] = slices.Clone(b)
			c.bytes += int64(len(b))
		}
	}
}

// ScriptStats returns the number of cached scripts and their bytes (INFO's
// number_of_cached_scripts and used_memory_scripts).
func (e *Engine) ScriptStats() (count int, bytes int64) {
	c := &e.scripts
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.bodies), c.bytes
}

// scriptOp runs OpScriptLoad, OpScriptExists and OpScriptFlush.
func (e *Engine) scriptOp(op *Op) Result {
	switch op.Code {
	case OpScriptLoad:
		if _, err := e.scripts.add(op.Value); err != nil {
			return Result{Err: err}
		}
		return Result{Value: []byte(ScriptSHA(op.Value))}
	case OpScriptExists:
		r := Result{Values: make([][]byte, len(op.Args))}
		for i, a := range op.Args {
			r.Values[i] = []byte{'0'}
			if sum, ok := parseSHA(a); ok {
				if _, ok := e.scripts.get(sum); ok {
					r.Values[i][0] = '1'
				}
			}
		}
		return r
	case OpScriptFlush:
		c := &e.scripts
		c.mu.Lock()
		n := len(c.bodies)
		c.bodies, c.bytes = nil, 0
		c.mu.Unlock()
		return Result{Count: int64(n)}
	}
	return Result{Err: badRule("unknown operation code %d", op.Code)}
}

// lk and unlk take and release a stripe's lock. On a script's view of
// the engine (nolock) they take nothing: the stripes of the declared keys
// are held already, and lk takes any other stripe the script's ops reach
// with TryLock, kept until the script ends (ScriptTx.need).
func (e *Engine) lk(s *stripe) {
	if !e.nolock {
		s.mu.Lock()
	} else if e.tx != nil {
		e.tx.need(s)
	}
}

func (e *Engine) unlk(s *stripe) {
	if !e.nolock {
		s.mu.Unlock()
	}
}

// errStripeBusy is the panic of ScriptTx.need when a stripe a script's op
// reaches is held elsewhere; ScriptTx.Apply recovers it.
type errStripeBusy struct{}

// ScriptTx is one run of a script: what the runner reads of the op, and
// the way its commands reach the engine.
type ScriptTx struct {
	view  Engine // the engine without locks, whose tx is this one
	eng   *Engine
	now   int64
	op    *Op
	body  []byte
	sum   [sha1.Size]byte
	sha   string
	abort bool
	// The before-images: the record of each key a nested op may change,
	// as it was before the first such op (present false: absent), in
	// order; all holds every record when an op changed every key.
	saved   []savedKey
	seen    map[string]struct{}
	keyBuf  []byte // the saved keys' bytes
	all     []Record
	allSeen bool
	// The stripes held: by index (held), in the order taken (order);
	// every stands for all of them. busy: an op reached a stripe held
	// elsewhere, so the run is undone and rerun holding every stripe.
	held  []bool
	order []int
	every bool
	busy  bool
}

// need makes sure s is held by the tx: taken with TryLock when it is not,
// or else the run is marked busy and the op stopped (errStripeBusy).
func (tx *ScriptTx) need(s *stripe) {
	if tx.every || tx.held[s.idx] {
		return
	}
	if !s.mu.TryLock() {
		tx.busy = true
		panic(errStripeBusy{})
	}
	tx.held[s.idx] = true
	tx.order = append(tx.order, s.idx)
}

type savedKey struct {
	key     []byte
	rec     Record
	present bool
}

// Body returns the script's text.
func (tx *ScriptTx) Body() []byte { return tx.body }

// SHA returns the script's SHA1 in lower-case hex.
func (tx *ScriptTx) SHA() string { return tx.sha }

// NumKeys returns how many of Args are keys.
func (tx *ScriptTx) NumKeys() int { return int(tx.op.NumKeys) }

// Args returns the script's keys, then its arguments.
func (tx *ScriptTx) Args() [][]byte { return tx.op.Args }

// Flags returns the op's Script* flags.
func (tx *ScriptTx) Flags() uint32 { return tx.op.Flags }

// Now returns the time the script runs at, in nanoseconds since the epoch
// (its TIME; expiry inside it is judged at it).
func (tx *ScriptTx) Now() int64 { return tx.now }

// Undo undoes the changes of the script's ops so far, at once: the
// runner then runs the script afresh (resp's native scripts fall back
// to the interpreter so).
func (tx *ScriptTx) Undo() {
	tx.undo()
	busy := tx.busy
	tx.clearRun()
	tx.busy = busy
}

// Abort has the script's changes undone once the runner returns.
func (tx *ScriptTx) Abort() { tx.abort = true }

// Apply runs a script command's ops in order at the script's time, each
// through its row of the table of operations. Clock and script ops are
// refused (resp refuses their commands first).
func (tx *ScriptTx) Apply(ops []Op, results []Result) {
	for i := range ops {
		if tx.busy {
			results[i] = Result{Err: badRule("a stripe the script reaches is busy: the script is rerun")}
			continue
		}
		tx.apply1(ops, i, results)
	}
}

// apply1 applies ops[i], stopped (and the run marked busy) by a stripe
// held elsewhere.
func (tx *ScriptTx) apply1(ops []Op, i int, results []Result) {
	v := &tx.view
	defer func() {
		if tx.busy {
			if r := recover(); r != nil {
				if _, ok := r.(errStripeBusy); !ok {
					panic(r)
				}
				results[i] = Result{Err: badRule("a stripe the script reaches is busy: the script is rerun")}
			}
		}
	}()
	op := &ops[i]
	row := &opRows[op.Code]
	switch {
	case row.apply == nil:
		results[i] = Result{Err: badRule("unknown operation code %d", op.Code)}
		return
	case row.clock || op.Code == OpEval || op.Code == OpEvalSha:
		results[i] = Result{Err: badRule("operation %s inside a script", op.Code)}
		return
	}
	op.DB = tx.op.DB // a script stays in its database (SELECT is refused in it)
	if row.mutates {
		tx.save(op)
	}
	row.apply(v, 0, tx.now, op, &results[i])
	if v.watch != nil {
		v.notify(ops[i : i+1])
	}
	if v.wt.active() {
		v.watchBump(ops[i:i+1], results[i:i+1])
	}
}

// save keeps the before-image of every key op may change.
func (tx *ScriptTx) save(op *Op) {
	switch op.Code.Keys() {
	case KeysKey:
		tx.saveKey(op.Key)
		if op.Code == OpRename && len(op.Args) > 0 {
			tx.saveKey(op.Args[0])
		}
	case KeysAll:
		for j := range op.All {
			tx.saveKey(op.All[j].Key)
		}
	case KeysEvery:
		if !tx.allSeen {
			tx.allSeen = true
			for i := range tx.view.stripes {
				tx.all = append(tx.all, tx.view.exportStripe(i, tx.view.countedAt(tx.now))...)
			}
		}
	}
}

func (tx *ScriptTx) saveKey(key []byte) {
	if key == nil || tx.allSeen {
		return
	}
	// A script saves a few keys: a scan, and a set past 16.
	if tx.seen == nil && len(tx.saved) <= 16 {
		for i := range tx.saved {
			if bytes.Equal(tx.saved[i].key, key) {
				return
			}
		}
	} else {
		if tx.seen == nil {
			tx.seen = make(map[string]struct{})
		}
		if len(tx.seen) == 0 {
			for i := range tx.saved {
				tx.seen[string(tx.saved[i].key)] = struct{}{}
			}
		}
		if _, ok := tx.seen[string(key)]; ok {
			return
		}
		tx.seen[string(key)] = struct{}{}
	}
	var rec Record
	var ok bool
	rec, tx.keyBuf, ok = tx.view.exportKeyTo(tx.keyBuf, key, tx.now)
	off := len(tx.keyBuf)
	tx.keyBuf = append(tx.keyBuf, key...)
	tx.saved = append(tx.saved, savedKey{key: tx.keyBuf[off:len(tx.keyBuf):len(tx.keyBuf)], rec: rec, present: ok})
}

// undo puts back every before-image, the last taken first: the image of
// every key (taken by the first op over all keys, after the keys saved
// one by one before it), then those keys in reverse order.
func (tx *ScriptTx) undo() {
	v := &tx.view
	if tx.allSeen {
		v.eachStripe(func(s *stripe) { s.reset() })
		if v.watch != nil {
			v.watch.AllChanged()
		}
		for _, rec := range tx.all {
			_ = v.Import(rec) // a record the engine exported
		}
	}
	for i := len(tx.saved) - 1; i >= 0; i-- {
		sk := &tx.saved[i]
		v.delete(tx.now, sk.key)
		if v.watch != nil {
			v.watch.KeyChanged(sk.key)
		}
		if sk.present {
			_ = v.Import(sk.rec)
		}
	}
}

// exportKey returns key's live record at now.
func (e *Engine) exportKey(key []byte, now int64) (Record, bool) {
	now = e.countedAt(now)
	hi, s := e.lock(key)
	defer e.unlk(s)
	_, idx, ok := s.find(hi, key)
	if !ok {
		return Record{}, false
	}
	return s.record(idx, s.entry(idx), now)
}

// eval runs OpEval and OpEvalSha at now.
func (e *Engine) eval(now int64, op *Op) Result {
	if e.runner == nil || e.nolock {
		return Result{Err: &errcode.Error{Code: errcode.NoScripting}}
	}
	var body []byte
	var sum [sha1.Size]byte
	if op.Code == OpEval {
		var err error
		if sum, err = e.scripts.add(op.Value); err != nil {
			return Result{Err: err}
		}
		body = op.Value
	} else {
		var ok bool
		if sum, ok = parseSHA(op.Value); ok {
			body, ok = e.scripts.get(sum)
		}
		if !ok {
			return Result{Err: &errcode.Error{Code: errcode.NoScript}}
		}
	}
	if op.NumKeys < 0 || op.NumKeys > int64(len(op.Args)) {
		return Result{Err: badRule("numkeys %d of %d arguments", op.NumKeys, len(op.Args))}
	}
	// The script runs on the top engine (topOnly: one script cache) over
	// its database's engine d, whose stripes its tx takes.
	d := e.db(op.DB)
	if d == nil {
		return Result{Err: errBadDB}
	}
	tx, _ := d.txs.Get().(*ScriptTx)
	if tx == nil {
		tx = &ScriptTx{eng: d, held: make([]bool, len(d.stripes))}
		tx.view = Engine{stripes: d.stripes, mask: d.mask, maxLog: d.maxLog, maxValue: d.maxValue,
			maxColl: d.maxColl, tot: d.tot, watch: d.watch, wt: d.wt, nolock: true, tx: tx}
	}
	if tx.sha == "" || tx.sum != sum { // a pooled tx mostly runs one script
		tx.sum, tx.sha = sum, hex.EncodeToString(sum[:])
	}
	tx.now, tx.op, tx.body = now, op, body
	tx.lockDeclared()
	reply := e.runner.RunScript(tx)
	if tx.busy {
		// An undeclared key's stripe was held elsewhere: undo, and rerun
		// holding every stripe (in ascending index, as RL.ALL).
		tx.undo()
		tx.unlockAll()
		tx.clearRun()
		for _, s := range d.stripes {
			s.mu.Lock()
		}
		tx.every = true
		reply = e.runner.RunScript(tx)
	}
	if tx.abort {
		tx.undo()
	}
	tx.unlockAll()
	tx.clearRun()
	tx.op, tx.body = nil, nil
	d.txs.Put(tx)
	return Result{Value: reply}
}

// lockDeclared takes the stripes of the script's declared keys, in
// ascending index (RL.ALL's order, so no deadlock).
func (tx *ScriptTx) lockDeclared() {
	e := tx.eng
	for _, k := range tx.op.Args[:tx.op.NumKeys] {
		i := int(xxhash.Sum64(k) & e.mask)
		if !tx.held[i] {
			tx.held[i] = true
			tx.order = append(tx.order, i)
		}
	}
	slices.Sort(tx.order)
	for _, i := range tx.order {
		e.stripes[i].mu.Lock()
	}
}

// unlockAll releases every stripe the tx holds, the last taken first.
func (tx *ScriptTx) unlockAll() {
	e := tx.eng
	if tx.every {
		for i := len(e.stripes) - 1; i >= 0; i-- {
			e.stripes[i].mu.Unlock()
		}
		tx.every = false
		return
	}
	for j := len(tx.order) - 1; j >= 0; j-- {
		i := tx.order[j]
		tx.held[i] = false
		e.stripes[i].mu.Unlock()
	}
	tx.order = tx.order[:0]
}

// maxKeptKeyBuf bounds the before-images' bytes a tx keeps between runs.
const maxKeptKeyBuf = 64 << 10

// clearRun forgets a run's before-images and outcome.
func (tx *ScriptTx) clearRun() {
	clear(tx.saved)
	tx.saved = tx.saved[:0]
	clear(tx.seen)
	tx.keyBuf = tx.keyBuf[:0]
	if cap(tx.keyBuf) > maxKeptKeyBuf {
		tx.keyBuf = nil // a run that saved many values: not kept
	}
	clear(tx.all)
	tx.all = tx.all[:0]
	tx.allSeen, tx.abort, tx.busy = false, false, false
}

// scriptView returns the engine as a script's nested ops see it: the same
// stripes, taking no lock (the tx holds them all). Its clock is unused.
func (e *Engine) scriptView() *Engine {
	return &Engine{
		stripes:  e.stripes,
		mask:     e.mask,
		maxLog:   e.maxLog,
		maxValue: e.maxValue,
		maxColl:  e.maxColl,
		tot:      e.tot,
		watch:    e.watch,
		wt:       e.wt,
		nolock:   true,
	}
}

// The algorithms of the operations of this file, as the table of
// operations (ops.go) names them.

func (e *Engine) opRename(_, now int64, op *Op, res *Result) { *res = e.rename(now, op) }
func (e *Engine) opEval(_, now int64, op *Op, res *Result)   { *res = e.eval(now, op) }
func (e *Engine) opScript(_, _ int64, op *Op, res *Result)   { *res = e.scriptOp(op) }

// rename is OpRename at now: the record of Key moves to Args[0].
func (e *Engine) rename(now int64, op *Op) Result {
	if len(op.Args) != 1 {
		return Result{Err: badRule("rename needs one new key")}
	}
	src, dst := op.Key, op.Args[0]
	lockPair := func() (*stripe, *stripe) {
		h1, h2 := xxhash.Sum64(src)&e.mask, xxhash.Sum64(dst)&e.mask
		a, b := e.stripes[min(h1, h2)], e.stripes[max(h1, h2)]
		e.lk(a)
		if b != a {
			e.lk(b)
		}
		return a, b
	}
	a, b := lockPair()
	inner := e
	if !e.nolock {
		inner = e.scriptView()
	}
	res := inner.renameLocked(now, src, dst, op.Flags&RenameNX != 0)
	if b != a {
		e.unlk(b)
	}
	e.unlk(a)
	if e.watch != nil && res.Err == nil && res.Count == 1 {
		e.watch.KeyChanged(dst)
	}
	return res
}

// renameLocked is rename on a view whose stripes are held.
func (e *Engine) renameLocked(now int64, src, dst []byte, nx bool) Result {
	rec, ok := e.exportKey(src, now)
	if !ok {
		return Result{Err: &errcode.Error{Code: errcode.NoSuchKey}}
	}
	if bytes.Equal(src, dst) {
		if nx {
			return Result{Count: 0}
		}
		return Result{Count: 1}
	}
	if nx {
		if _, exists := e.exportKey(dst, now); exists {
			return Result{Count: 0}
		}
	}
	e.delete(now, src)
	e.delete(now, dst)
	rec.Key = slices.Clone(dst)
	if err := e.Import(rec); err != nil {
		return Result{Err: err}
	}
	return Result{Count: 1}
}
