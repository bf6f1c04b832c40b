package engine

import (
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// WATCH (docs/design.md, "WATCH"). A key's group decides at apply time
// whether a watched key changed since its WATCH, so the answer is the same
// on every replica and through any node: OpWatch, through the log,
// registers the key in the engine's watch table (only watched keys are
// there) and replies the key's version; every change of a registered key
// (a mutation that changed it, a removal: a delete, an expiry drained, a
// flush) gives it a new version; EXEC sends OpWatchCheck first in the same
// batch, and when a key's version moved, or a key live at its WATCH is no
// more (it expired), or its registration is gone, the check fails and the
// engine skips the transaction's ops that follow it. A registration lives
// watchLease of the log's time after its last WATCH, so a client that
// vanishes leaks nothing; a client watching longer sees its EXEC fail,
// which is safe. The table is part of the replicated state (snapshots
// carry it: ExportWatches).

// Operation codes of databases and WATCH (numbers 120..139 are reserved
// for them; cluster version 3).
const (
	// OpWatch registers Key of DB in the watch table: Result.Cursor is its
	// version (0 when the table is full: a version no check matches),
	// Result.Count 1 if the key is live, else 0.
	OpWatch OpCode = 120
	// OpWatchCheck checks watched keys: Args holds pairs of a key and its
	// stamp (WatchStamp: the version and liveness OpWatch replied, the
	// key's database).
	// Result.Count is 1 when none changed; otherwise 0, and the Count ops
	// that follow it in the batch are skipped (their results zero). Key is
	// the first watched key, for routing only.
	OpWatchCheck OpCode = 121
)

const (
	// watchLease is how long a registration lives after its last WATCH,
	// in nanoseconds of the log's time.
	watchLease = int64(5 * 60 * 1e9)
	// maxWatched bounds the keys registered at once; a WATCH beyond it
	// replies version 0, so its EXEC fails.
	maxWatched = 1 << 16
	// watchShards is the number of independently locked parts of the
	// table (a power of two).
	watchShards = 64
)

type watchEntry struct {
	ver   uint64
	lease int64 // the log time the registration ends
}

type watchShard struct {
	mu sync.Mutex
	m  map[string]watchEntry
	_  [40]byte
}

// watchTable is the engine's table of watched keys, keyed by the database
// byte then the key. n counts registrations, so that a mutation with
// nothing watched costs one atomic load.
type watchTable struct {
	n      atomic.Int64
	seq    atomic.Uint64
	shards [watchShards]watchShard
}

func (t *watchTable) active() bool { return t.n.Load() != 0 }

// shardOf returns the shard of db/key and the table key's bytes in buf.
func (t *watchTable) shardOf(buf []byte, db uint8, key []byte) (*watchShard, []byte) {
	b := append(append(buf[:0], db), key...)
	return &t.shards[xxhash.Sum64(b)&(watchShards-1)], b
}

// bump gives db/key a new version if it is registered.
func (t *watchTable) bump(db uint8, key []byte) {
	if !t.active() {
		return
	}
	var tmp [64]byte
	sh, k := t.shardOf(tmp[:], db, key)
	sh.mu.Lock()
	if e, ok := sh.m[string(k)]; ok {
		e.ver = t.seq.Add(1)
		sh.m[string(k)] = e
	}
	sh.mu.Unlock()
}

// bumpAll gives every registered key of db (every database when all) a
// new version (a flush).
func (t *watchTable) bumpAll(db uint8, all bool) {
	if !t.active() {
		return
	}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if all || k[0] == db {
				e.ver = t.seq.Add(1)
				sh.m[k] = e
			}
		}
		sh.mu.Unlock()
	}
}

// keysOf returns the registered keys of database db (without the
// database byte).
func (t *watchTable) keysOf(db uint8) [][]byte {
	var out [][]byte
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for k := range sh.m {
			if k[0] == db {
				out = append(out, []byte(k[1:]))
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// register registers db/key at now and returns its version.
func (t *watchTable) register(now int64, db uint8, key []byte) uint64 {
	var tmp [64]byte
	sh, k := t.shardOf(tmp[:], db, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[string(k)]
	if !ok {
		if t.n.Load() >= maxWatched {
			t.prune(now, sh)
			if t.n.Load() >= maxWatched {
				return 0
			}
		}
		if sh.m == nil {
			sh.m = make(map[string]watchEntry)
		}
		e.ver = t.seq.Add(1)
		t.n.Add(1)
	}
	e.lease = max(e.lease, now+watchLease)
	sh.m[string(k)] = e
	return e.ver
}

// prune forgets the registrations whose lease ended at now; held is the
// shard whose lock the caller holds.
func (t *watchTable) prune(now int64, held *watchShard) {
	for i := range t.shards {
		sh := &t.shards[i]
		if sh != held {
			sh.mu.Lock()
		}
		for k, e := range sh.m {
			if e.lease <= now {
				delete(sh.m, k)
				t.n.Add(-1)
			}
		}
		if sh != held {
			sh.mu.Unlock()
		}
	}
}

// version returns db/key's version at now, 0 when it is not registered or
// its lease ended.
func (t *watchTable) version(now int64, db uint8, key []byte) uint64 {
	var tmp [64]byte
	sh, k := t.shardOf(tmp[:], db, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.m[string(k)]; ok && e.lease > now {
		return e.ver
	}
	return 0
}

// reset forgets every registration.
func (t *watchTable) reset() {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		t.n.Add(-int64(len(sh.m)))
		sh.m = nil
		sh.mu.Unlock()
	}
}

// WatchStamp is what a client keeps of a WATCH of a key of database db
// to send back in OpWatchCheck: the version OpWatch replied, whether the
// key was live, its database.
func WatchStamp(r *Result, db uint8) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 10), r.Cursor)
	return append(b, byte(r.Count), db)
}

// opWatch is OpWatch.
func (e *Engine) opWatch(_, now int64, op *Op, res *Result) {
	*res = Result{Cursor: e.wt.register(now, op.DB, op.Key)}
	if e.live(now, op.DB, op.Key) {
		res.Count = 1
	}
}

// opWatchCheck is OpWatchCheck's verdict; Apply skips the ops after it
// when it failed.
func (e *Engine) opWatchCheck(_, now int64, op *Op, res *Result) {
	*res = Result{}
	if e.watchCheck(now, op) {
		res.Count = 1
	}
}

// watchCheck is OpWatchCheck's verdict.
func (e *Engine) watchCheck(now int64, op *Op) bool {
	if len(op.Args)%2 != 0 {
		return false
	}
	for i := 0; i < len(op.Args); i += 2 {
		key, stamp := op.Args[i], op.Args[i+1]
		if len(stamp) != 10 || int(stamp[9]) >= NumDBs {
			return false
		}
		v, db := binary.BigEndian.Uint64(stamp), stamp[9]
		if v == 0 || e.wt.version(now, db, key) != v {
			return false
		}
		if stamp[8] == 1 && !e.live(now, db, key) {
			return false // expired since its WATCH
		}
	}
	return true
}

// live reports whether db/key has state at now.
func (e *Engine) live(now int64, db uint8, key []byte) bool {
	d := e
	if e.dbs != nil {
		if d = e.db(db); d == nil {
			return false
		}
	}
	return d.inspect(now, OpExists, key).Count == 1
}

// changedNothing reports whether a mutating op certainly changed nothing,
// by its result: WATCH then keeps the key's version, as Redis touches a
// key only when a command changed it (a SET NX that did not set, an
// EXPIRE whose condition stopped it, an error).
func changedNothing(op *Op, r *Result) bool {
	if r.Err != nil {
		return true
	}
	switch op.Code {
	case OpSet, OpExpire, OpPersist, OpDelete, OpRelease:
		return r.Count == 0
	case OpGetDel:
		return r.Kind != KindString
	case OpGetEx:
		return r.Kind != KindString || op.Flags&(StrExpireRel|StrExpireAbs|StrPersist) == 0
	case OpWatch, OpWatchCheck, OpSwapDB, OpMove, OpFlush, OpFlushDB:
		return true // they bump what they change themselves
	}
	return false
}

// watchBump gives the keys ops changed new versions (results say which
// certainly changed nothing).
func (e *Engine) watchBump(ops []Op, results []Result) {
	for i := range ops {
		op := &ops[i]
		if !op.Code.Mutates() || changedNothing(op, &results[i]) {
			continue
		}
		switch op.Code.Keys() {
		case KeysEvery:
			e.wt.bumpAll(op.DB, true)
		case KeysAll:
			for j := range op.All {
				if op.All[j].Cost != 0 {
					e.wt.bump(op.DB, op.All[j].Key)
				}
			}
		case KeysKey:
			if op.Cost != 0 || op.Code != OpDecide && op.Code != OpAcquire {
				e.wt.bump(op.DB, op.Key)
			}
		}
	}
}

// Watch table chunks in snapshots: a chunk is a sequence of records
// (uvarint key length | db byte + key | uint64 version | int64 lease,
// big-endian), the first chunk opening with the table's sequence number
// (uint64).
const watchChunk = 60 << 10

// ExportWatches returns the watch table as chunks of at most about 60 KiB
// (a snapshot's meta values), registrations whose lease ended at now left
// out; nil when nothing is registered.
func (e *Engine) ExportWatches(now int64) [][]byte {
	if !e.wt.active() {
		return nil
	}
	cur := binary.BigEndian.AppendUint64(nil, e.wt.seq.Load())
	var out [][]byte
	for i := range e.wt.shards {
		sh := &e.wt.shards[i]
		sh.mu.Lock()
		for k, ent := range sh.m {
			if ent.lease <= now {
				continue
			}
			if len(cur)+len(k)+26 > watchChunk {
				out = append(out, cur)
				cur = nil
			}
			cur = binary.AppendUvarint(cur, uint64(len(k)))
			cur = append(cur, k...)
			cur = binary.BigEndian.AppendUint64(cur, ent.ver)
			cur = binary.BigEndian.AppendUint64(cur, uint64(ent.lease))
		}
		sh.mu.Unlock()
	}
	return append(out, cur)
}

var errWatchChunk = errors.New("engine: malformed watch table chunk")

// ImportWatches adds one chunk ExportWatches wrote (the first first).
func (e *Engine) ImportWatches(chunk []byte, first bool) error {
	if first {
		if len(chunk) < 8 {
			return errWatchChunk
		}
		e.wt.seq.Store(max(e.wt.seq.Load(), binary.BigEndian.Uint64(chunk)))
		chunk = chunk[8:]
	}
	for len(chunk) > 0 {
		n, w := binary.Uvarint(chunk)
		if w <= 0 || n == 0 || n > uint64(len(chunk)-w) || uint64(len(chunk)-w)-n < 16 {
			return errWatchChunk
		}
		k := chunk[w : w+int(n)]
		chunk = chunk[w+int(n):]
		ver := binary.BigEndian.Uint64(chunk)
		lease := int64(binary.BigEndian.Uint64(chunk[8:]))
		chunk = chunk[16:]
		sh := &e.wt.shards[xxhash.Sum64(k)&(watchShards-1)]
		sh.mu.Lock()
		if sh.m == nil {
			sh.m = make(map[string]watchEntry)
		}
		if _, ok := sh.m[string(k)]; !ok {
			e.wt.n.Add(1)
		}
		sh.m[string(k)] = watchEntry{ver: ver, lease: lease}
		sh.mu.Unlock()
	}
	return nil
}
