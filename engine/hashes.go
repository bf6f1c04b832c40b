package engine

import (
	"math/big"
	"strconv"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// Hashes (KindHash): HSET, HGET, HGETALL... (SPEC section 15). A hash
// keeps its fields in insertion order, always: redis-server answers
// HGETALL, HKEYS, HVALS and HSCAN in insertion order for a small hash (a
// listpack), which Traefik's limiter reads by position; HDEL keeps the
// others' order, and a new value for a field keeps its place. This file
// holds the ops; the two representations of a hash are hashvals.go, the
// long double arithmetic of HINCRBYFLOAT numbers.go.

// OpCodes of hashes (60..79 are reserved for them).
const (
	// OpHSet sets Args' field/value pairs; Result.Count is the number of
	// fields added. Flags HashNX: only a field that is absent (HSETNX,
	// one pair; Count 1 or 0).
	OpHSet OpCode = 60
	// OpHGet reads the field Args[0]: Result.Count is 1 and Result.Value
	// its value when present (HGET, HEXISTS, HSTRLEN).
	OpHGet OpCode = 61
	// OpHMGet reads the fields of Args: Result.Values, nil for an absent
	// field.
	OpHMGet OpCode = 62
	// OpHGetAll reads the whole hash in insertion order: Result.Values the
	// fields and values alternating (Flags HashKeys: fields only,
	// HashVals: values only), only the fields matching Pattern if it is
	// set (HSCAN's MATCH).
	OpHGetAll OpCode = 63
	// OpHDel deletes the fields of Args; Result.Count how many existed.
	OpHDel OpCode = 64
	// OpHLen sets Result.Count to the number of fields.
	OpHLen OpCode = 65
	// OpHIncrBy adds Delta to the integer in field Args[0] (0 when absent);
	// Result.Count is the new value.
	OpHIncrBy OpCode = 66
	// OpHIncrByFloat adds the float Args[1] to field Args[0]; Result.Value
	// is the new value as Redis prints it.
	OpHIncrByFloat OpCode = 67
)

// Flags of the hash ops.
const (
	HashNX   uint32 = 1 << iota // OpHSet: only absent fields (HSETNX)
	HashKeys                    // OpHGetAll: fields only
	HashVals                    // OpHGetAll: values only
)

// HashOps lists the hash OpCodes.
var HashOps = [...]OpCode{OpHSet, OpHGet, OpHMGet, OpHGetAll, OpHDel, OpHLen, OpHIncrBy, OpHIncrByFloat}

// hashOp runs one hash op.
func (c *collCtx) hashOp() Result {
	op := c.op
	var h hashColl
	if c.obj != nil {
		h = c.obj.(hashColl)
	}
	switch op.Code {
	case OpHSet:
		if len(op.Args) == 0 || len(op.Args)%2 != 0 {
			return Result{Err: badRule("HSET needs field/value pairs")}
		}
		if err := c.tooLong(0, 1); err != nil {
			return Result{Err: err}
		}
		nx := op.Flags&HashNX != 0
		// Count what is new first: nothing changes when refused.
		newElems, newBytes := 0, int64(0)
		first := firstTimes(op.Args, 0, 2)
		for i := 0; i < len(op.Args); i += 2 {
			f := op.Args[i]
			if h != nil {
				if _, ok := h.get(f); ok {
					if !nx {
						newBytes += int64(len(op.Args[i+1]))
					}
					continue
				}
			}
			if first[i] {
				newElems++
				newBytes += int64(len(f) + len(op.Args[i+1]))
			}
		}
		if nx && newElems == 0 {
			return Result{}
		}
		if err := c.room(newElems, newBytes); err != nil {
			return Result{Err: err}
		}
		if h == nil {
			h = &smallHash{}
			c.create(h)
		}
		h = c.hashFor(h, newElems, newBytes)
		added := int64(0)
		for i := 0; i < len(op.Args); i += 2 {
			if h.set(op.Args[i], op.Args[i+1]) {
				added++
			}
		}
		return Result{Count: added}
	case OpHGet:
		if h == nil || len(op.Args) != 1 {
			return Result{}
		}
		if rec, ok := h.get(op.Args[0]); ok {
			return Result{Count: 1, Kind: KindHash, Value: append([]byte{}, h.val(rec)...)}
		}
		return Result{}
	case OpHMGet:
		var vb valuesBuilder
		for _, f := range op.Args {
			if h == nil {
				vb.addNil()
				continue
			}
			if rec, ok := h.get(f); ok {
				vb.add(h.val(rec))
			} else {
				vb.addNil()
			}
		}
		return Result{Values: vb.values()}
	case OpHGetAll:
		if h == nil {
			return Result{Values: [][]byte{}}
		}
		var vb valuesBuilder
		vb.buf = make([]byte, 0, h.dataBytes())
		h.each(func(rec uint32) {
			if op.Pattern != nil && !MatchGlob(op.Pattern, h.keyAt(rec)) {
				return
			}
			if op.Flags&HashVals == 0 {
				vb.add(h.keyAt(rec))
			}
			if op.Flags&HashKeys == 0 {
				vb.add(h.val(rec))
			}
		})
		return Result{Values: vb.values(), Kind: KindHash}
	case OpHDel:
		if h == nil {
			return Result{}
		}
		n := int64(0)
		for _, f := range op.Args {
			if h.del(f) {
				n++
			}
		}
		return Result{Count: n}
	case OpHLen:
		if h == nil {
			return Result{}
		}
		return Result{Count: int64(h.size())}
	case OpHIncrBy:
		if len(op.Args) != 1 {
			return Result{Err: badRule("HINCRBY needs a field")}
		}
		if err := c.tooLong(0, 1); err != nil {
			return Result{Err: err}
		}
		var v int64
		found := false
		if h != nil {
			var rec uint32
			if rec, found = h.get(op.Args[0]); found {
				var ok bool
				if v, ok = ParseInt(h.val(rec)); !ok {
					return Result{Err: errcode.New(errcode.HashNotInteger)}
				}
			}
		}
		v, err := incrBy(v, op.Delta)
		if err != nil {
			return Result{Err: err}
		}
		var buf [20]byte
		val := strconv.AppendInt(buf[:0], v, 10)
		return c.hashStore(h, found, val, Result{Count: v})
	case OpHIncrByFloat:
		if len(op.Args) != 2 {
			return Result{Err: badRule("HINCRBYFLOAT needs a field and an increment")}
		}
		if err := c.tooLong(0, 1); err != nil {
			return Result{Err: err}
		}
		incr, ok := ParseLongDouble(op.Args[1])
		if !ok {
			return Result{Err: errcode.New(errcode.NotFloat)}
		}
		if incr.IsInf() {
			return Result{Err: errcode.New(errcode.NaNOrInfinity)}
		}
		v := new(big.Float).SetPrec(64)
		found := false
		if h != nil {
			var rec uint32
			if rec, found = h.get(op.Args[0]); found {
				if v, ok = ParseLongDouble(h.val(rec)); !ok {
					return Result{Err: errcode.New(errcode.HashNotFloat)}
				}
			}
		}
		sum, ok := AddLongDouble(v, incr)
		if !ok {
			return Result{Err: errcode.New(errcode.NaNOrInfinity)}
		}
		val := FormatLongDouble(nil, sum)
		if err := c.e.valueTooLong(len(val)); err != nil {
			return Result{Err: err}
		}
		return c.hashStore(h, found, val, Result{Value: val, Kind: KindHash})
	}
	return Result{Err: badRule("unknown operation code %d", op.Code)}
}

// hashStore stores val at field Args[0] of h (nil: a new hash) and
// returns res, or the room's error.
func (c *collCtx) hashStore(h hashColl, found bool, val []byte, res Result) Result {
	f := c.op.Args[0]
	if !found {
		if err := c.room(1, int64(len(f)+len(val))); err != nil {
			return Result{Err: err}
		}
	}
	if h == nil {
		h = &smallHash{}
		c.create(h)
	}
	h = c.hashFor(h, 1, int64(len(f)+len(val)))
	h.set(f, val)
	return res
}
