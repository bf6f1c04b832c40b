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
// its writes, as in Redis. This file holds the ops and the cache; the tx
// and eval are scripttx.go.

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
