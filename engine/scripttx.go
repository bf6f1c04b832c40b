package engine

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// One run of a script (scripts.go has the cache and the ops): ScriptTx,
// which holds the stripes of the declared keys (and takes any other its
// ops reach), keeps each key's record before a nested op first changes
// it so that an aborted run is undone, and runs the nested ops on a view
// of the engine that takes no lock (scriptView); eval, which runs OpEval
// and OpEvalSha through it.

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
	v := e.sharing(e.stripes)
	v.nolock = true
	return v
}
