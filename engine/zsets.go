package engine

import (
	"math"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// Sorted sets (KindZSet): ZADD, ZRANGE, ZREMRANGEBYSCORE... (SPEC section
// 15). A sorted set is its members' records, an index member -> record,
// and a treap of the records ordered by (score, member) whose nodes count
// their subtree, so an update, a rank or the n-th element is O(log n)
// and a range costs O(log n) per element it touches. The treap's
// priorities are local random numbers: its shape is no part of the
// replicated state (only the order is, which is the same on every
// replica), and no client can choose members that unbalance it. This
// file holds the ops; the structure is zsettreap.go, the ranges the ops
// take zsetrange.go.

// OpCodes of sorted sets (80..99 are reserved for them).
const (
	// OpZAdd adds or updates Args' score/member pairs (scores as text,
	// parsed as ZADD does), under Flags ZNX, ZXX, ZGT, ZLT, ZCH, ZIncr.
	// Result.Count is the number added (with ZCH: added or changed); with
	// ZIncr (one pair), Result.Value is the new score and Result.Kind
	// KindZSet, or Kind KindNone when the conditions left it unchanged.
	OpZAdd OpCode = 80
	// OpZRem removes the members of Args; Result.Count how many existed.
	OpZRem OpCode = 81
	// OpZCard sets Result.Count to the number of members.
	OpZCard OpCode = 82
	// OpZScore sets Result.Values to the scores of Args' members (nil for
	// an absent one).
	OpZScore OpCode = 83
	// OpZRank sets Result.Count to the rank of member Args[0] (ZRev: from
	// the highest) and Result.Kind to KindZSet, or Kind KindNone when
	// absent.
	OpZRank OpCode = 84
	// OpZRange reads a range: Args are min, max, offset and count (text).
	// Without ZByScore or ZByLex, min and max are ranks; ZRev reverses;
	// ZLimit applies offset and count; ZWithScores puts each member's
	// score after it in Result.Values; ZCountOnly sets Result.Count
	// instead (ZCOUNT).
	OpZRange OpCode = 85
	// OpZRemRange removes a range of ranks, or of scores (ZByScore), or
	// of members (ZByLex); Args are min and max. Result.Count is how many.
	OpZRemRange OpCode = 86
	// OpZPop removes and returns the Count lowest members (ZRev: highest),
	// each followed by its score, in Result.Values.
	OpZPop OpCode = 87
)

// Flags of the sorted set ops.
const (
	ZNX uint32 = 1 << iota
	ZXX
	ZGT
	ZLT
	ZCH
	ZIncr
	ZByScore
	ZByLex
	ZRev
	ZLimit
	ZWithScores
	ZCountOnly
)

// ZSetOps lists the sorted set OpCodes.
var ZSetOps = [...]OpCode{OpZAdd, OpZRem, OpZCard, OpZScore, OpZRank, OpZRange, OpZRemRange, OpZPop}

// zsetOp runs one sorted set op.
func (c *collCtx) zsetOp() Result {
	op := c.op
	var z *zsetVal
	if c.obj != nil {
		z = c.obj.(*zsetVal)
	}
	switch op.Code {
	case OpZAdd:
		return c.zadd(z)
	case OpZRem:
		if z == nil {
			return Result{}
		}
		n := int64(0)
		for _, m := range op.Args {
			if _, rec, ok := z.find(m); ok {
				z.remove(rec)
				n++
				if z.n == 0 {
					break
				}
			}
		}
		return Result{Count: n}
	case OpZCard:
		if z == nil {
			return Result{}
		}
		return Result{Count: int64(z.n)}
	case OpZScore:
		var vb valuesBuilder
		var buf []byte
		for _, m := range op.Args {
			if z == nil {
				vb.addNil()
				continue
			}
			if _, rec, ok := z.find(m); ok {
				buf = FormatScore(buf[:0], z.recs[rec].score)
				vb.add(buf)
			} else {
				vb.addNil()
			}
		}
		return Result{Values: vb.values()}
	case OpZRank:
		if z == nil || len(op.Args) != 1 {
			return Result{}
		}
		_, rec, ok := z.find(op.Args[0])
		if !ok {
			return Result{}
		}
		r := z.rank(rec)
		if op.Flags&ZRev != 0 {
			r = uint32(z.n) - 1 - r
		}
		return Result{Kind: KindZSet, Count: int64(r)}
	case OpZRange:
		return c.zrange(z)
	case OpZRemRange:
		if len(op.Args) != 2 {
			return Result{Err: badRule("a range needs min and max")}
		}
		if z == nil {
			return Result{}
		}
		lo, hi, ok := z.span(op.Flags, op.Args[0], op.Args[1])
		if !ok {
			return Result{Err: badRule("bad range")}
		}
		for k := lo; k < hi; k++ {
			z.remove(z.at(lo))
		}
		return Result{Count: int64(hi - lo)}
	case OpZPop:
		if op.Count < 0 {
			return Result{Err: badRule("negative count")}
		}
		var vb valuesBuilder
		var buf []byte
		for k := int64(0); k < op.Count && z != nil && z.n > 0; k++ {
			rec := z.at(0)
			if op.Flags&ZRev != 0 {
				rec = z.at(uint32(z.n - 1))
			}
			vb.add(z.keyAt(rec))
			buf = FormatScore(buf[:0], z.recs[rec].score)
			vb.add(buf)
			z.remove(rec)
		}
		return Result{Values: vb.values()}
	}
	return Result{Err: badRule("unknown operation code %d", op.Code)}
}

// zrange is OpZRange.
func (c *collCtx) zrange(z *zsetVal) Result {
	op := c.op
	if len(op.Args) != 4 {
		return Result{Err: badRule("a range needs min, max, offset and count")}
	}
	f := op.Flags
	minArg, maxArg := op.Args[0], op.Args[1]
	if f&ZRev != 0 && f&(ZByScore|ZByLex) != 0 {
		minArg, maxArg = maxArg, minArg // ZRANGE ... REV BYSCORE takes max first
	}
	if z == nil {
		if f&(ZByScore|ZByLex) != 0 {
			if _, _, ok := (&zsetVal{}).span(f, minArg, maxArg); !ok {
				return Result{Err: badRule("bad range")}
			}
		}
		return Result{Values: [][]byte{}}
	}
	var lo, hi uint32
	var ok bool
	if f&(ZByScore|ZByLex) == 0 && f&ZRev != 0 {
		// ranks counted from the highest
		var a, b uint32
		if a, b, ok = z.span(f, minArg, maxArg); ok && a < b {
			n := uint32(z.n)
			lo, hi = n-b, n-a
		}
	} else {
		lo, hi, ok = z.span(f, minArg, maxArg)
	}
	if !ok {
		return Result{Err: badRule("bad range")}
	}
	if f&ZCountOnly != 0 {
		return Result{Count: int64(hi - lo)}
	}
	if f&ZLimit != 0 {
		offset, ok1 := ParseInt(op.Args[2])
		count, ok2 := ParseInt(op.Args[3])
		if !ok1 || !ok2 {
			return Result{Err: ErrNotInteger}
		}
		if offset < 0 || offset >= int64(hi-lo) {
			return Result{Values: [][]byte{}}
		}
		if f&ZRev != 0 {
			hi -= uint32(offset)
		} else {
			lo += uint32(offset)
		}
		if count >= 0 && count < int64(hi-lo) {
			if f&ZRev != 0 {
				lo = hi - uint32(count)
			} else {
				hi = lo + uint32(count)
			}
		}
	}
	var vb valuesBuilder
	var buf []byte
	emit := func(rec uint32) {
		vb.add(z.keyAt(rec))
		if f&ZWithScores != 0 {
			buf = FormatScore(buf[:0], z.recs[rec].score)
			vb.add(buf)
		}
	}
	if f&ZRev != 0 {
		for k := hi; k > lo; k-- {
			emit(z.at(k - 1))
		}
	} else {
		for k := lo; k < hi; k++ {
			emit(z.at(k))
		}
	}
	return Result{Values: vb.values(), Kind: KindZSet}
}

// zadd is OpZAdd, as Redis's zsetAdd for each pair.
func (c *collCtx) zadd(z *zsetVal) Result {
	op := c.op
	f := op.Flags
	if len(op.Args) == 0 || len(op.Args)%2 != 0 || f&ZIncr != 0 && len(op.Args) != 2 {
		return Result{Err: badRule("ZADD needs score/member pairs")}
	}
	scores := make([]float64, len(op.Args)/2)
	for i := range scores {
		v, ok := ParseScore(op.Args[2*i])
		if !ok {
			return Result{Err: errcode.New(errcode.NotFloat)}
		}
		scores[i] = v
	}
	if err := c.tooLong(1, 2); err != nil {
		return Result{Err: err}
	}
	if z == nil && f&ZXX != 0 {
		return Result{}
	}
	// What is new, first: nothing changes when refused.
	newElems, newBytes := 0, int64(0)
	if f&ZXX == 0 {
		first := firstTimes(op.Args, 1, 2)
		for i := 1; i < len(op.Args); i += 2 {
			m := op.Args[i]
			if z != nil {
				if _, _, ok := z.find(m); ok {
					continue
				}
			}
			if first[i] {
				newElems++
				newBytes += int64(len(m))
			}
		}
	}
	// An INCR that would make NaN changes nothing.
	if f&ZIncr != 0 && z != nil {
		if _, rec, ok := z.find(op.Args[1]); ok && f&ZNX == 0 {
			if math.IsNaN(z.recs[rec].score + scores[0]) {
				return Result{Err: errcode.New(errcode.ScoreNaN)}
			}
		}
	}
	if newElems > 0 {
		if err := c.room(newElems, newBytes); err != nil {
			return Result{Err: err}
		}
	}
	if z == nil {
		if newElems == 0 {
			return Result{}
		}
		z = &zsetVal{}
		c.create(z)
	}
	added, changed := int64(0), int64(0)
	res := Result{}
	for i, score := range scores {
		m := op.Args[2*i+1]
		if _, rec, ok := z.find(m); ok {
			if f&ZNX != 0 {
				continue
			}
			cur := z.recs[rec].score
			if f&ZIncr != 0 {
				score += cur
			}
			if f&ZLT != 0 && score >= cur || f&ZGT != 0 && score <= cur {
				continue
			}
			if f&ZIncr != 0 {
				res.Kind, res.Value = KindZSet, FormatScore(nil, score)
			}
			if score != cur {
				z.setScore(rec, score)
				changed++
			}
			continue
		}
		if f&ZXX != 0 {
			continue
		}
		z.insert(m, score)
		added++
		if f&ZIncr != 0 {
			res.Kind, res.Value = KindZSet, FormatScore(nil, score)
		}
	}
	res.Count = added
	if f&ZCH != 0 {
		res.Count += changed
	}
	return res
}
