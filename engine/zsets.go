package engine

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// Sorted sets (KindZSet): ZADD, ZRANGE, ZREMRANGEBYSCORE... (SPEC section
// 15). A sorted set is its members' records, an index member -> record,
// and a treap of the records ordered by (score, member) whose nodes count
// their subtree, so an update, a rank or the n-th element is O(log n)
// and a range costs O(log n) per element it touches. The treap's
// priorities are local random numbers: its shape is no part of the
// replicated state (only the order is, which is the same on every
// replica), and no client can choose members that unbalance it.

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

// zsetVal is one sorted set.
type zsetVal struct {
	arena   []byte
	recs    []zrec
	free    []uint32
	idx     bdict
	root    uint32 // record + 1; 0: empty
	n       int
	garbage int
	data    int64
}

// zrec is one member: its bytes, its score, and its treap node (l, r:
// record + 1; size: the subtree's members). A free record has mlen ==
// holeLen.
type zrec struct {
	off, mlen uint32
	score     float64
	l, r      uint32
	size      uint32
	prio      uint32
}

func (z *zsetVal) size() int        { return z.n }
func (z *zsetVal) dataBytes() int64 { return z.data + int64(z.n)*zsetElemCost }
func (z *zsetVal) keyAt(i uint32) []byte {
	r := &z.recs[i]
	return z.arena[r.off : r.off+r.mlen]
}

func (z *zsetVal) find(m []byte) (slot int, rec uint32, ok bool) {
	if z.idx.slots != nil {
		return z.idx.find(z, m)
	}
	for i := range z.recs {
		if z.recs[i].mlen != holeLen && string(z.keyAt(uint32(i))) == string(m) {
			return -1, uint32(i), true
		}
	}
	return -1, 0, false
}

// less orders records by (score, member).
func (z *zsetVal) less(a, b uint32) bool {
	ra, rb := &z.recs[a], &z.recs[b]
	if ra.score != rb.score {
		return ra.score < rb.score
	}
	return bytes.Compare(z.keyAt(a), z.keyAt(b)) < 0
}

func (z *zsetVal) sz(t uint32) uint32 {
	if t == 0 {
		return 0
	}
	return z.recs[t-1].size
}

func (z *zsetVal) fix(t uint32) {
	r := &z.recs[t-1]
	r.size = 1 + z.sz(r.l) + z.sz(r.r)
}

// split splits tree t into the nodes ordered before record k and the rest.
func (z *zsetVal) split(t, k uint32) (uint32, uint32) {
	if t == 0 {
		return 0, 0
	}
	if z.less(t-1, k) {
		a, b := z.split(z.recs[t-1].r, k)
		z.recs[t-1].r = a
		z.fix(t)
		return t, b
	}
	a, b := z.split(z.recs[t-1].l, k)
	z.recs[t-1].l = b
	z.fix(t)
	return a, t
}

// merge joins trees a and b, every node of a ordered before b's.
func (z *zsetVal) merge(a, b uint32) uint32 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	if z.recs[a-1].prio > z.recs[b-1].prio {
		z.recs[a-1].r = z.merge(z.recs[a-1].r, b)
		z.fix(a)
		return a
	}
	z.recs[b-1].l = z.merge(a, z.recs[b-1].l)
	z.fix(b)
	return b
}

// insert adds member m (absent) with score.
func (z *zsetVal) insert(m []byte, score float64) {
	off := uint32(len(z.arena))
	z.arena = append(z.arena, m...)
	r := zrec{off: off, mlen: uint32(len(m)), score: score, size: 1, prio: rand.Uint32()}
	var rec uint32
	if n := len(z.free); n > 0 {
		rec = z.free[n-1]
		z.free = z.free[:n-1]
		z.recs[rec] = r
	} else {
		z.recs = append(z.recs, r)
		rec = uint32(len(z.recs) - 1)
	}
	z.n++
	z.data += int64(len(m))
	z.link(rec)
	switch {
	case z.idx.slots != nil:
		z.idx.add(z, rec, z.n-1)
	case z.n > bdictMin:
		z.reindex()
	}
}

// link puts record rec into the treap.
func (z *zsetVal) link(rec uint32) {
	z.recs[rec].l, z.recs[rec].r, z.recs[rec].size = 0, 0, 1
	a, b := z.split(z.root, rec)
	z.root = z.merge(z.merge(a, rec+1), b)
}

// unlink takes record rec out of the treap.
func (z *zsetVal) unlink(rec uint32) {
	z.root = z.unlinkFrom(z.root, rec)
}

func (z *zsetVal) unlinkFrom(t, rec uint32) uint32 {
	if t-1 == rec {
		return z.merge(z.recs[rec].l, z.recs[rec].r)
	}
	if z.less(rec, t-1) {
		z.recs[t-1].l = z.unlinkFrom(z.recs[t-1].l, rec)
	} else {
		z.recs[t-1].r = z.unlinkFrom(z.recs[t-1].r, rec)
	}
	z.fix(t)
	return t
}

// remove deletes record rec (at index slot, -1 without an index).
func (z *zsetVal) remove(rec uint32) {
	z.unlink(rec)
	if z.idx.slots != nil {
		slot, _, _ := z.idx.find(z, z.keyAt(rec))
		z.idx.del(z, slot)
	}
	r := &z.recs[rec]
	z.garbage += int(r.mlen)
	z.data -= int64(r.mlen)
	r.mlen = holeLen
	z.free = append(z.free, rec)
	z.n--
	if z.n == 0 {
		*z = zsetVal{}
		return
	}
	if z.garbage*2 > len(z.arena) && z.garbage >= 256 || len(z.free)*2 > len(z.recs) && len(z.free) >= 64 {
		z.compact()
	}
}

// setScore moves record rec to a new score.
func (z *zsetVal) setScore(rec uint32, score float64) {
	z.unlink(rec)
	z.recs[rec].score = score
	z.link(rec)
}

// compact rewrites the arena and the records, keeping the order.
func (z *zsetVal) compact() {
	old := *z
	*z = zsetVal{arena: make([]byte, 0, int(old.data)), recs: make([]zrec, 0, old.n)}
	old.each(func(i uint32) {
		r := old.recs[i]
		m := old.keyAt(i)
		r.off = uint32(len(z.arena))
		z.arena = append(z.arena, m...)
		z.recs = append(z.recs, r)
	})
	z.n, z.data = old.n, old.data
	// the records are in order: build a balanced tree with fresh
	// priorities by linking each.
	for i := range z.recs {
		z.link(uint32(i))
	}
	z.reindex()
}

func (z *zsetVal) reindex() {
	if z.n <= bdictMin {
		z.idx.slots = nil
		return
	}
	live := make([]uint32, 0, z.n)
	for i := range z.recs {
		if z.recs[i].mlen != holeLen {
			live = append(live, uint32(i))
		}
	}
	z.idx.rebuildSize(z, live, tableSize(z.n))
}

// each calls f for every record in order.
func (z *zsetVal) each(f func(rec uint32)) {
	var walk func(t uint32)
	walk = func(t uint32) {
		for t != 0 {
			walk(z.recs[t-1].l)
			f(t - 1)
			t = z.recs[t-1].r
		}
	}
	walk(z.root)
}

// at returns the record of rank k (0-based, k < n).
func (z *zsetVal) at(k uint32) uint32 {
	t := z.root
	for {
		ls := z.sz(z.recs[t-1].l)
		switch {
		case k < ls:
			t = z.recs[t-1].l
		case k == ls:
			return t - 1
		default:
			k -= ls + 1
			t = z.recs[t-1].r
		}
	}
}

// rank returns record rec's rank.
func (z *zsetVal) rank(rec uint32) uint32 {
	t, k := z.root, uint32(0)
	for t-1 != rec {
		if z.less(rec, t-1) {
			t = z.recs[t-1].l
		} else {
			k += z.sz(z.recs[t-1].l) + 1
			t = z.recs[t-1].r
		}
	}
	return k + z.sz(z.recs[rec].l)
}

// countBefore returns how many records satisfy before (a predicate true
// for a prefix of the order).
func (z *zsetVal) countBefore(before func(rec uint32) bool) uint32 {
	t, k := z.root, uint32(0)
	for t != 0 {
		if before(t - 1) {
			k += z.sz(z.recs[t-1].l) + 1
			t = z.recs[t-1].r
		} else {
			t = z.recs[t-1].l
		}
	}
	return k
}

// ScoreBound is one end of a score range: a value, exclusive with "(".
type ScoreBound struct {
	V    float64
	Excl bool
}

// ParseScoreBound parses a ZRANGEBYSCORE bound as Redis's zslParseRange:
// "(" for exclusive, then strtod's number (inf, -inf), NaN refused.
func ParseScoreBound(b []byte) (ScoreBound, bool) {
	var sb ScoreBound
	if len(b) > 0 && b[0] == '(' {
		sb.Excl = true
		b = b[1:]
	}
	v, ok := parseStrtod(b)
	sb.V = v
	return sb, ok
}

// parseStrtod is zslParseRange's strtod: leading spaces skipped, the
// rest wholly a number, an empty string 0, out-of-range values saturated
// (strtod's HUGE_VAL, which Redis does not look at errno for), NaN
// refused.
func parseStrtod(b []byte) (float64, bool) {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, true
	}
	for _, c := range b {
		if c == '_' || c == 0 {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); !ok || ne.Err != strconv.ErrRange {
			return 0, false
		}
	}
	return f, !math.IsNaN(f)
}

// LexBound is one end of a lexical range: "-" (Min), "+" (Max), "[x"
// inclusive or "(x" exclusive.
type LexBound struct {
	V        []byte
	Excl     bool
	Min, Max bool
}

// ParseLexBound parses a BYLEX bound as Redis's zslParseLexRangeItem.
func ParseLexBound(b []byte) (LexBound, bool) {
	if len(b) == 0 {
		return LexBound{}, false
	}
	switch b[0] {
	case '+':
		return LexBound{Max: true}, len(b) == 1
	case '-':
		return LexBound{Min: true}, len(b) == 1
	case '(':
		return LexBound{V: b[1:], Excl: true}, true
	case '[':
		return LexBound{V: b[1:]}, true
	}
	return LexBound{}, false
}

// below reports whether member m lies below bound lo (as a minimum).
func (lo LexBound) below(m []byte) bool {
	switch {
	case lo.Min:
		return false
	case lo.Max:
		return true
	}
	c := bytes.Compare(m, lo.V)
	return c < 0 || c == 0 && lo.Excl
}

// within reports whether member m is not beyond bound hi (as a maximum).
func (hi LexBound) within(m []byte) bool {
	switch {
	case hi.Max:
		return true
	case hi.Min:
		return false
	}
	c := bytes.Compare(m, hi.V)
	return c < 0 || c == 0 && !hi.Excl
}

// span returns the ranks [lo, hi) of the op's score or lex range, or of
// its ranks; ok is false for an argument that does not parse.
func (z *zsetVal) span(flags uint32, minArg, maxArg []byte) (lo, hi uint32, ok bool) {
	n := uint32(z.n)
	switch {
	case flags&ZByScore != 0:
		mn, ok1 := ParseScoreBound(minArg)
		mx, ok2 := ParseScoreBound(maxArg)
		if !ok1 || !ok2 {
			return 0, 0, false
		}
		lo = z.countBefore(func(r uint32) bool {
			s := z.recs[r].score
			return s < mn.V || s == mn.V && mn.Excl
		})
		hi = z.countBefore(func(r uint32) bool {
			s := z.recs[r].score
			return s < mx.V || s == mx.V && !mx.Excl
		})
	case flags&ZByLex != 0:
		mn, ok1 := ParseLexBound(minArg)
		mx, ok2 := ParseLexBound(maxArg)
		if !ok1 || !ok2 {
			return 0, 0, false
		}
		lo = z.countBefore(func(r uint32) bool { return mn.below(z.keyAt(r)) })
		hi = z.countBefore(func(r uint32) bool { return mx.within(z.keyAt(r)) })
	default:
		start, ok1 := ParseInt(minArg)
		end, ok2 := ParseInt(maxArg)
		if !ok1 || !ok2 {
			return 0, 0, false
		}
		ln := int64(n)
		if start < 0 {
			start += ln
		}
		if end < 0 {
			end += ln
		}
		if start < 0 {
			start = 0
		}
		if start > end || start >= ln {
			return 0, 0, true
		}
		if end >= ln {
			end = ln - 1
		}
		return uint32(start), uint32(end + 1), true
	}
	if hi < lo {
		hi = lo
	}
	return lo, hi, true
}

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
