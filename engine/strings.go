package engine

import (
	"math"
	"math/big"
	"strconv"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// String keys (KindString): the Redis counter commands that existing
// limiters send (GET, SET, INCRBY, EXPIRE, ...; docs/design.md, "String
// keys"). A string key holds a value of at most Config.MaxValueLen bytes
// and an optional expiry, a Unix time in whole milliseconds (as Redis keeps
// it), judged against the op's time: the key is absent from the first op
// whose time (ns) is at or past expiry*1e6, on every replica alike, since
// every replica applies the same ops at the same times.
//
// The entry's words: a is the expiry in ms (0: none), b the value's id in
// the stripe's strSlab, c the entry's position + 1 in the stripe's expiry heap
// (0: not in it). Expired keys are reclaimed without a scan of the
// keyspace: each stripe keeps a binary min-heap of its string keys with an
// expiry, ordered by expiry, and every string op drains the heap of its
// stripe at its own time (Sweep drains every stripe's); a lookup treats an
// expired key as absent and removes it. With limits set, the drain removes
// only keys that stopped counting (memory.go), so the counted state is the
// same on every replica.

// OpCodes introduced with strings (numbers 20..39 are reserved for them; a
// cluster must run a version that knows them before they enter the log):
//
//	20 OpGet, 21 OpSet, 22 OpIncrBy, 23 OpGetDel, 24 OpGetEx,
//	25 OpExpire, 26 OpPersist, 27 OpStrlen, 28 OpExpireTime,
//	29 OpIncrByFloat (v0.3.0)
const (
	// OpGet reads Key: Result.Kind is its kind (KindNone when absent) and,
	// for a string, Result.Value a copy of its value. It never fails.
	OpGet OpCode = 20
	// OpSet stores Value at Key as a string (SET and its relatives),
	// replacing a limiter key unless StrGet is set. Flags: StrNX, StrXX,
	// StrGet, StrKeepTTL and an expiry (StrExpireRel/StrExpireAbs with
	// Expire in ms). Result.Count is 1 when the value was stored; with
	// StrGet, Result.Kind and Value are the old value's (as OpGet).
	OpSet OpCode = 21
	// OpIncrBy adds Delta to the integer held at Key (0 when absent),
	// keeping its expiry; Result.Count is the new value.
	OpIncrBy OpCode = 22
	// OpGetDel reads Key as OpGet does and deletes it if it is a string.
	OpGetDel OpCode = 23
	// OpGetEx reads Key as OpGet does and then sets (StrExpireRel,
	// StrExpireAbs) or removes (StrPersist) its expiry.
	OpGetEx OpCode = 24
	// OpExpire sets Key's expiry (EXPIRE and its relatives): Expire in ms,
	// relative (StrExpireRel) or absolute (StrExpireAbs), under the
	// conditions StrIfNX, StrIfXX, StrIfGT, StrIfLT. Result.Count is 1 when
	// set (an expiry already past deletes the key), else 0.
	OpExpire OpCode = 25
	// OpPersist removes Key's expiry; Result.Count is 1 if it had one.
	OpPersist OpCode = 26
	// OpStrlen sets Result.Count to the length of Key's value (0 absent).
	OpStrlen OpCode = 27
	// OpExpireTime sets Result.Time to Key's expiry as a Unix time in ms,
	// -1 when it has none, -2 when absent.
	OpExpireTime OpCode = 28
	// OpIncrByFloat adds the float Value (its text, as the client sent
	// it; ParseFloat) to the float held at Key (0 when absent), keeping its
	// expiry; Result.Value is the new value's text (AppendFloat), which
	// the key then holds.
	OpIncrByFloat OpCode = 29
)

// Flags of the string ops (Op.Flags).
const (
	StrNX        uint32 = 1 << iota // OpSet: only if absent
	StrXX                           // OpSet: only if present
	StrGet                          // OpSet: reply the old value (WRONGTYPE on a limiter key)
	StrKeepTTL                      // OpSet: keep the expiry
	StrExpireRel                    // Op.Expire is milliseconds from the op's time
	StrExpireAbs                    // Op.Expire is a Unix time in milliseconds
	StrPersist                      // OpGetEx: remove the expiry
	StrIfNX                         // OpExpire: only when the key has no expiry
	StrIfXX                         // OpExpire: only when it has one
	StrIfGT                         // OpExpire: only to a later expiry (none counts as infinite)
	StrIfLT                         // OpExpire: only to an earlier expiry
	// StrBadInt and StrBadExpire make OpGetEx fail after its lookup, as
	// GETEX reports a bad expiry argument only for an existing string key.
	StrBadInt
	StrBadExpire

	strFlagsAll = StrBadExpire<<1 - 1
)

const (
	// DefaultMaxValueLen is Config.MaxValueLen's default (--max-value-len).
	DefaultMaxValueLen = 512
	// maxValueLenCap bounds any value the engine accepts, whatever the
	// configuration (a snapshot from a node with a larger setting).
	maxValueLenCap = 1 << 24
	// strCost is a string key's accounting beyond its entry: its value's
	// slot and its heap slot (memory.go); the value's bytes add to it.
	strCost = 40
)

// Errors of the string ops.
var (
	// ErrWrongTypeValue: a string command on a limiter key (Redis's text).
	ErrWrongTypeValue error = errcode.New(errcode.WrongTypeValue)
	// ErrNotInteger: INCRBY on a value that is not a 64-bit integer, or a
	// bad integer argument carried in an op.
	ErrNotInteger error = errcode.New(errcode.NotInteger)
	// ErrIncrOverflow: INCRBY would overflow a 64-bit integer.
	ErrIncrOverflow error = errcode.New(errcode.IncrOverflow)
	// ErrBadExpire: an expiry out of range (Redis's "invalid expire time").
	ErrBadExpire error = errcode.New(errcode.BadExpire)
	// ErrNotFloat: INCRBYFLOAT on a value, or with an increment, that is
	// not a float (ParseFloat).
	ErrNotFloat error = errcode.New(errcode.NotFloat)
	// ErrIncrNaN: INCRBYFLOAT's result would be NaN or an infinity.
	ErrIncrNaN error = errcode.New(errcode.NaNOrInfinity)
)

// strSlab holds a stripe's string values; free lists released ids; bytes
// sums the values' lengths (for the accounting); heap is the expiry heap
// of entry indices.
type strSlab struct {
	vals  [][]byte
	free  []uint32
	bytes int64
	heap  []uint32
}

func (v *strSlab) alloc(val []byte) uint32 {
	var id uint32
	if n := len(v.free); n > 0 {
		id = v.free[n-1]
		v.free = v.free[:n-1]
	} else {
		v.vals = append(v.vals, nil)
		id = uint32(len(v.vals) - 1)
	}
	v.vals[id] = append([]byte(nil), val...)
	v.bytes += int64(len(val))
	return id
}

func (v *strSlab) set(id uint32, val []byte) {
	v.bytes += int64(len(val) - len(v.vals[id]))
	v.vals[id] = append(v.vals[id][:0], val...)
}

func (v *strSlab) release(id uint32) {
	v.bytes -= int64(len(v.vals[id]))
	v.vals[id] = nil
	v.free = append(v.free, id)
}

func (v *strSlab) live() int64 { return int64(len(v.vals) - len(v.free)) }

// msToNs converts a Unix time in ms to ns, saturating.
func msToNs(ms int64) int64 {
	if ms > math.MaxInt64/1_000_000 {
		return math.MaxInt64
	}
	return ms * 1e6
}

// strLive reports whether a string entry has not expired at now.
func strLive(e *entry, now int64) bool { return e.a == 0 || now < msToNs(e.a) }

// heapLess orders the expiry heap by expiry, then entry index.
func (s *stripe) heapLess(i, j int) bool {
	h := s.strs.heap
	a, b := s.entry(h[i]).a, s.entry(h[j]).a
	return a < b || a == b && h[i] < h[j]
}

func (s *stripe) heapSwap(i, j int) {
	h := s.strs.heap
	h[i], h[j] = h[j], h[i]
	s.entry(h[i]).c = int64(i + 1)
	s.entry(h[j]).c = int64(j + 1)
}

func (s *stripe) heapUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.heapLess(i, p) {
			return
		}
		s.heapSwap(i, p)
		i = p
	}
}

func (s *stripe) heapDown(i int) {
	n := len(s.strs.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.heapLess(r, l) {
			m = r
		}
		if !s.heapLess(m, i) {
			return
		}
		s.heapSwap(i, m)
		i = m
	}
}

// heapRemove takes entry idx (in the heap) out of it.
func (s *stripe) heapRemove(idx uint32) {
	e := s.entry(idx)
	i := int(e.c - 1)
	last := len(s.strs.heap) - 1
	if i != last {
		s.heapSwap(i, last)
	}
	s.strs.heap = s.strs.heap[:last]
	e.c = 0
	if i != last {
		s.heapDown(i)
		s.heapUp(i)
	}
}

// setExpiry sets string entry idx's expiry (ms, 0: none), keeping the heap.
func (s *stripe) setExpiry(idx uint32, exp int64) {
	e := s.entry(idx)
	switch {
	case exp == 0 && e.c != 0:
		s.heapRemove(idx)
	case exp != 0 && e.c == 0:
		s.strs.heap = append(s.strs.heap, idx)
		e.c = int64(len(s.strs.heap))
	}
	e.a = exp
	if exp != 0 {
		i := int(e.c - 1)
		s.heapDown(i)
		s.heapUp(i)
	}
}

// strDrain removes the string keys expired at now, in expiry order.
func (s *stripe) strDrain(now int64) {
	for len(s.strs.heap) > 0 {
		idx := s.strs.heap[0]
		if now < msToNs(s.entry(idx).a) {
			return
		}
		key := s.keyOf(s.entry(idx))
		if pos, found, ok := s.find(hiHash(xxhash.Sum64(key)), key); ok && found == idx {
			s.remove(pos, idx)
		} else {
			s.heapRemove(idx) // cannot happen: every heap entry is a live key
		}
	}
}

// strInsert adds a string key at the miss position pos.
func (s *stripe) strInsert(pos, hi uint32, key, val []byte, exp int64) uint32 {
	id := s.strs.alloc(val)
	idx := s.insert(pos, hi, key, Rule{Kind: KindString}, state{b: int64(id)})
	if exp != 0 {
		s.setExpiry(idx, exp)
	}
	s.account()
	return idx
}

// strLookup finds key at now: its slot position, entry index and live kind
// (KindNone when absent). An entry that is no longer live is removed first,
// so pos is then the miss position.
func (s *stripe) strLookup(now int64, hi uint32, key []byte) (pos, idx uint32, kind Kind) {
	pos, idx, ok := s.find(hi, key)
	if !ok {
		return pos, 0, KindNone
	}
	_, r, _, live := s.liveState(s.entry(idx), now)
	if live {
		return pos, idx, r.Kind
	}
	s.remove(pos, idx)
	pos, _, _ = s.find(hi, key)
	return pos, 0, KindNone
}

// strValue returns string entry idx's value (aliasing the slab).
func (s *stripe) strValue(idx uint32) []byte { return s.strs.vals[s.entry(idx).b] }

// strFunc is one string op's algorithm, run on its key's stripe s, locked,
// hi being the key's hash.
type strFunc func(e *Engine, now int64, hi uint32, s *stripe, op *Op) Result

// strOp makes a string op's applyFunc of its algorithm f: f runs on the
// key's stripe, after the stripe's expired strings go, and again on exact
// figures (strOpFull) when it returns errNoRoom, as it does when the op
// would create a key and only an exact count can tell whether there is
// room (memory.go); it then changed nothing that matters.
func strOp(f strFunc) applyFunc {
	return func(e *Engine, _, now int64, op *Op, res *Result) {
		if op.Flags&^strFlagsAll != 0 {
			*res = Result{Err: badRule("unknown string flags %#x", op.Flags)}
			return
		}
		hi, s := e.lock(op.Key)
		s.strDrain(e.countedAt(now))
		*res = f(e, now, hi, s, op)
		e.unlk(s)
		if res.Err == errNoRoom {
			*res = e.strOpFull(now, op, f)
		}
	}
}

// strGet is OpGet.
func (e *Engine) strGet(now int64, hi uint32, s *stripe, op *Op) Result {
	_, idx, kind := s.strLookup(now, hi, op.Key)
	return s.strRead(idx, kind)
}

// strGetDel is OpGetDel.
func (e *Engine) strGetDel(now int64, hi uint32, s *stripe, op *Op) Result {
	pos, idx, kind := s.strLookup(now, hi, op.Key)
	if kind != KindNone && kind != KindString {
		return Result{Err: ErrWrongTypeValue}
	}
	r := s.strRead(idx, kind)
	if kind == KindString {
		s.remove(pos, idx)
	}
	return r
}

// strPersist is OpPersist.
func (e *Engine) strPersist(now int64, hi uint32, s *stripe, op *Op) Result {
	_, idx, kind := s.strLookup(now, hi, op.Key)
	switch {
	case kind == KindNone:
		return Result{}
	case !isValueKind(kind):
		return Result{Err: ErrWrongType}
	case s.entry(idx).a == 0:
		return Result{}
	}
	s.setExpiry(idx, 0)
	return Result{Count: 1}
}

// strStrlen is OpStrlen.
func (e *Engine) strStrlen(now int64, hi uint32, s *stripe, op *Op) Result {
	_, idx, kind := s.strLookup(now, hi, op.Key)
	switch kind {
	case KindNone:
		return Result{}
	case KindString:
		return Result{Count: int64(len(s.strValue(idx)))}
	}
	return Result{Err: ErrWrongTypeValue}
}

// strExpireTime is OpExpireTime.
func (e *Engine) strExpireTime(now int64, hi uint32, s *stripe, op *Op) Result {
	_, idx, kind := s.strLookup(now, hi, op.Key)
	switch {
	case kind == KindNone:
		return Result{Time: -2}
	case isValueKind(kind):
		if a := s.entry(idx).a; a != 0 {
			return Result{Time: a}
		}
		return Result{Time: -1}
	}
	return Result{Err: ErrWrongType}
}

// strRead is OpGet's result for the looked-up key.
func (s *stripe) strRead(idx uint32, kind Kind) Result {
	if kind != KindString {
		return Result{Kind: kind}
	}
	return Result{Kind: KindString, Value: append([]byte{}, s.strValue(idx)...)}
}

// expiryAt resolves an op's expiry to a Unix time in ms at now: ok is
// false when it has none; err is ErrBadExpire when a relative one
// overflows.
func expiryAt(op *Op, now int64) (ms int64, ok bool, err error) {
	switch {
	case op.Flags&StrExpireAbs != 0:
		return op.Expire, true, nil
	case op.Flags&StrExpireRel != 0:
		base := now / 1e6
		if op.Expire > math.MaxInt64-base {
			return 0, false, ErrBadExpire
		}
		return base + op.Expire, true, nil
	}
	return 0, false, nil
}

func (e *Engine) valueTooLong(n int) error {
	if n > e.maxValue {
		return &errcode.Error{Code: errcode.ValueTooLong, Num: int64(e.maxValue)}
	}
	return nil
}

// strSet is OpSet.
func (e *Engine) strSet(now int64, hi uint32, s *stripe, op *Op) Result {
	when, hasExp, err := expiryAt(op, now)
	if err != nil {
		return Result{Err: err}
	}
	if err := e.valueTooLong(len(op.Value)); err != nil {
		return Result{Err: err}
	}
	pos, idx, kind := s.strLookup(now, hi, op.Key)
	var res Result
	if op.Flags&StrGet != 0 {
		if kind != KindNone && kind != KindString {
			return Result{Err: ErrWrongTypeValue}
		}
		res = s.strRead(idx, kind)
	}
	found := kind != KindNone
	if op.Flags&StrNX != 0 && found || op.Flags&StrXX != 0 && !found {
		return res
	}
	exp := int64(0)
	switch {
	case hasExp:
		exp = when
	case op.Flags&StrKeepTTL != 0 && kind == KindString:
		exp = s.entry(idx).a
	}
	if exp != 0 && msToNs(exp) <= now {
		// Set already expired (SET ... PXAT in the past): absent after it.
		if found {
			s.remove(pos, idx)
		}
		res.Count = 1
		return res
	}
	switch kind {
	case KindString:
		s.strs.set(uint32(s.entry(idx).b), op.Value)
		s.setExpiry(idx, exp)
		s.account()
	case KindNone:
		if err := s.roomExtra(op.Key, KindString, 0, int64(len(op.Value))); err != nil {
			return Result{Err: err}
		}
		s.strInsert(pos, hi, op.Key, op.Value, exp)
	default:
		// A limiter key is replaced, as SET replaces a key of any type in
		// Redis: not a creation, so never refused by the limits.
		s.remove(pos, idx)
		pos, _, _ = s.find(hi, op.Key)
		s.strInsert(pos, hi, op.Key, op.Value, exp)
	}
	res.Count = 1
	return res
}

// strIncr is OpIncrBy.
func (e *Engine) strIncr(now int64, hi uint32, s *stripe, op *Op) Result {
	pos, idx, kind := s.strLookup(now, hi, op.Key)
	var v int64
	switch kind {
	case KindNone:
	case KindString:
		var ok bool
		if v, ok = ParseInt(s.strValue(idx)); !ok {
			return Result{Err: ErrNotInteger}
		}
	default:
		return Result{Err: ErrWrongTypeValue}
	}
	d := op.Delta
	if d < 0 && v < 0 && d < math.MinInt64-v || d > 0 && v > 0 && d > math.MaxInt64-v {
		return Result{Err: ErrIncrOverflow}
	}
	v += d
	var buf [20]byte
	val := strconv.AppendInt(buf[:0], v, 10)
	if err := e.storeCounter(s, pos, idx, hi, kind, op.Key, val); err != nil {
		return Result{Err: err}
	}
	return Result{Count: v}
}

// storeCounter writes an INCRBY or INCRBYFLOAT result val to key: in place
// when the key holds a string (kind), keeping its expiry, else as a new
// string key without one, within --max-value-len and the memory limits.
func (e *Engine) storeCounter(s *stripe, pos, idx, hi uint32, kind Kind, key, val []byte) error {
	if err := e.valueTooLong(len(val)); err != nil {
		return err
	}
	if kind == KindString {
		s.strs.set(uint32(s.entry(idx).b), val)
		s.account()
		return nil
	}
	if err := s.roomExtra(key, KindString, 0, int64(len(val))); err != nil {
		return err
	}
	s.strInsert(pos, hi, key, val, 0)
	return nil
}

// strIncrFloat is OpIncrByFloat: in an x87 long double, as HINCRBYFLOAT
// (hashes.go) and redis-server on x86-64 compute it, so 0.1 then 0.2 gives
// 0.3 as in Redis.
func (e *Engine) strIncrFloat(now int64, hi uint32, s *stripe, op *Op) Result {
	pos, idx, kind := s.strLookup(now, hi, op.Key)
	v := new(big.Float)
	switch kind {
	case KindNone:
	case KindString:
		var ok bool
		if v, ok = ParseLongDouble(s.strValue(idx)); !ok {
			return Result{Err: ErrNotFloat}
		}
	default:
		return Result{Err: ErrWrongTypeValue}
	}
	d, ok := ParseLongDouble(op.Value)
	if !ok {
		return Result{Err: ErrNotFloat}
	}
	sum, ok := AddLongDouble(v, d)
	if !ok || sum.IsInf() {
		return Result{Err: ErrIncrNaN}
	}
	val := FormatLongDouble(nil, sum)
	if err := e.storeCounter(s, pos, idx, hi, kind, op.Key, val); err != nil {
		return Result{Err: err}
	}
	return Result{Kind: KindString, Value: val}
}

// strGetEx is OpGetEx.
func (e *Engine) strGetEx(now int64, hi uint32, s *stripe, op *Op) Result {
	pos, idx, kind := s.strLookup(now, hi, op.Key)
	switch {
	case kind == KindNone:
		return Result{}
	case kind != KindString:
		return Result{Err: ErrWrongTypeValue}
	case op.Flags&StrBadInt != 0:
		return Result{Err: ErrNotInteger}
	case op.Flags&StrBadExpire != 0:
		return Result{Err: ErrBadExpire}
	}
	when, hasExp, err := expiryAt(op, now)
	if err != nil {
		return Result{Err: err}
	}
	res := s.strRead(idx, kind)
	switch {
	case hasExp && msToNs(when) <= now:
		s.remove(pos, idx)
	case hasExp:
		s.setExpiry(idx, when)
	case op.Flags&StrPersist != 0:
		s.setExpiry(idx, 0)
	}
	return res
}

// strExpire is OpExpire.
func (e *Engine) strExpire(now int64, hi uint32, s *stripe, op *Op) Result {
	when, _, err := expiryAt(op, now)
	if err != nil {
		return Result{Err: err}
	}
	pos, idx, kind := s.strLookup(now, hi, op.Key)
	switch {
	case kind == KindNone:
		return Result{}
	case !isValueKind(kind):
		return Result{Err: ErrWrongType}
	}
	cur := s.entry(idx).a // 0: none
	f := op.Flags
	switch {
	case f&StrIfNX != 0 && cur != 0,
		f&StrIfXX != 0 && cur == 0,
		f&StrIfGT != 0 && (cur == 0 || when <= cur),
		f&StrIfLT != 0 && cur != 0 && when >= cur:
		return Result{}
	}
	if msToNs(when) <= now {
		s.remove(pos, idx)
	} else {
		s.setExpiry(idx, when)
	}
	return Result{Count: 1}
}

// ParseInt parses b as Redis parses a 64-bit integer value (string2ll): an
// optional '-', no '+', no leading zeros or spaces, at most 20 bytes.
func ParseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) >= 21 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := b[0] == '-'
	p := b
	if neg {
		p = p[1:]
		if len(p) == 0 {
			return 0, false
		}
	}
	if p[0] < '1' || p[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range p {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > math.MaxUint64/10 {
			return 0, false
		}
		v *= 10
		if v > math.MaxUint64-uint64(c-'0') {
			return 0, false
		}
		v += uint64(c - '0')
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}

// strOpFull runs string op algorithm f once the held totals left no room
// for a new key: it makes every stripe's accounting exact at now, then
// runs the op again on the exact figures (as decideFull).
func (e *Engine) strOpFull(now int64, op *Op, f strFunc) Result {
	e.reclaimAll(now)
	hi, s := e.lock(op.Key)
	defer e.unlk(s)
	s.final = true
	res := f(e, now, hi, s, op)
	s.final = false
	return res
}

// drainExpired removes every stripe's string keys expired at now (with
// limits, those that stopped counting), one stripe lock at a time, for
// Sweep: each stripe's heap is looked at, not its keys.
func (e *Engine) drainExpired(now int64) int {
	n := 0
	e.eachStripe(func(s *stripe) {
		before := s.count.Load()
		s.strDrain(now)
		n += int(before - s.count.Load())
	})
	return n
}
