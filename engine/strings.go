package engine

import (
	"math"
	"math/big"
	"strconv"

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
// same on every replica. This file holds the ops; the slab and the heap
// are strstore.go, ParseInt and the long double numbers.go.

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
	v, err := incrBy(v, op.Delta)
	if err != nil {
		return Result{Err: err}
	}
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
