package engine

import (
	"encoding/binary"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// Hashes (KindHash): HSET, HGET, HGETALL... (SPEC section 15). A hash
// keeps its fields in insertion order, always: redis-server answers
// HGETALL, HKEYS, HVALS and HSCAN in insertion order for a small hash (a
// listpack), which Traefik's limiter reads by position; HDEL keeps the
// others' order, and a new value for a field keeps its place.

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

// hashVal is one hash: its fields and values packed in arena, recs in
// insertion order (a deleted field leaves a hole until compaction), an
// index of the fields once the hash has more than bdictMin of them.
type hashVal struct {
	arena   []byte
	recs    []hrec
	idx     bdict
	n       int
	holes   int
	garbage int // dead bytes in arena
	data    int64
}

// hrec is one field: its bytes at arena[off:off+flen], its value's right
// after. A hole has flen == holeLen.
type hrec struct{ off, flen, vlen uint32 }

const holeLen = math.MaxUint32

func (h *hashVal) size() int        { return h.n }
func (h *hashVal) dataBytes() int64 { return h.data + int64(h.n)*hashElemCost }
func (h *hashVal) keyAt(i uint32) []byte {
	r := h.recs[i]
	return h.arena[r.off : r.off+r.flen]
}

func (h *hashVal) val(i uint32) []byte {
	r := h.recs[i]
	return h.arena[r.off+r.flen : r.off+r.flen+r.vlen]
}

// find returns the record of field f.
func (h *hashVal) find(f []byte) (slot int, rec uint32, ok bool) {
	if h.idx.slots != nil {
		return h.idx.find(h, f)
	}
	for i := range h.recs {
		if h.recs[i].flen != holeLen && string(h.keyAt(uint32(i))) == string(f) {
			return -1, uint32(i), true
		}
	}
	return -1, 0, false
}

// set sets field f to v, reporting whether the field is new.
func (h *hashVal) set(f, v []byte) bool {
	slot, rec, ok := h.find(f)
	if ok {
		r := &h.recs[rec]
		h.data += int64(len(v)) - int64(r.vlen)
		if uint32(len(v)) <= r.vlen {
			copy(h.arena[r.off+r.flen:], v)
			h.garbage += int(r.vlen) - len(v)
			r.vlen = uint32(len(v))
			return false
		}
		h.garbage += int(r.flen + r.vlen)
		off := uint32(len(h.arena))
		h.arena = append(append(h.arena, f...), v...)
		r.off, r.vlen = off, uint32(len(v))
		h.maybeCompact()
		return false
	}
	_ = slot
	off := uint32(len(h.arena))
	h.arena = append(append(h.arena, f...), v...)
	h.recs = append(h.recs, hrec{off: off, flen: uint32(len(f)), vlen: uint32(len(v))})
	h.n++
	h.data += int64(len(f) + len(v))
	rec = uint32(len(h.recs) - 1)
	switch {
	case h.idx.slots != nil:
		h.idx.add(h, rec, h.n-1)
	case h.n > bdictMin:
		h.reindex()
	}
	return true
}

// del removes field f, reporting whether it existed.
func (h *hashVal) del(f []byte) bool {
	slot, rec, ok := h.find(f)
	if !ok {
		return false
	}
	if slot >= 0 {
		h.idx.del(h, slot)
	}
	r := &h.recs[rec]
	h.garbage += int(r.flen + r.vlen)
	h.data -= int64(r.flen + r.vlen)
	r.flen = holeLen
	h.n--
	h.holes++
	if rec == uint32(len(h.recs)-1) {
		for len(h.recs) > 0 && h.recs[len(h.recs)-1].flen == holeLen {
			h.recs = h.recs[:len(h.recs)-1]
			h.holes--
		}
	}
	h.maybeCompact()
	return true
}

// maybeCompact rewrites the arena and records, in order, once more than
// half of either is dead.
func (h *hashVal) maybeCompact() {
	if h.holes*2 <= len(h.recs) && (h.garbage*2 <= len(h.arena) || h.garbage < 256) {
		return
	}
	if h.n == 0 {
		*h = hashVal{}
		return
	}
	arena := make([]byte, 0, int(h.data))
	recs := make([]hrec, 0, h.n)
	for i := range h.recs {
		r := h.recs[i]
		if r.flen == holeLen {
			continue
		}
		off := uint32(len(arena))
		arena = append(arena, h.arena[r.off:r.off+r.flen+r.vlen]...)
		recs = append(recs, hrec{off: off, flen: r.flen, vlen: r.vlen})
	}
	h.arena, h.recs, h.holes, h.garbage = arena, recs, 0, 0
	h.reindex()
}

// reindex rebuilds the index (none for a small hash).
func (h *hashVal) reindex() {
	if h.n <= bdictMin {
		h.idx.slots = nil
		return
	}
	live := make([]uint32, 0, h.n)
	for i := range h.recs {
		if h.recs[i].flen != holeLen {
			live = append(live, uint32(i))
		}
	}
	h.idx.rebuildSize(h, live, tableSize(h.n))
}

// each calls f for every field in insertion order.
func (h *hashVal) each(f func(rec uint32)) {
	for i := range h.recs {
		if h.recs[i].flen != holeLen {
			f(uint32(i))
		}
	}
}

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
		d := op.Delta
		if d < 0 && v < 0 && d < math.MinInt64-v || d > 0 && v > 0 && d > math.MaxInt64-v {
			return Result{Err: ErrIncrOverflow}
		}
		v += d
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

// ParseScore parses b as Redis's string2d (strtod) parses a sorted set's
// score: the whole string, no spaces around it, "inf"/"-inf" and their
// spellings accepted, NaN and overflow refused. ParseLongDouble is
// INCRBYFLOAT's and HINCRBYFLOAT's.
func ParseScore(b []byte) (float64, bool) {
	if len(b) == 0 || len(b) > 5000 {
		return 0, false
	}
	if c := b[0]; c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' {
		return 0, false
	}
	if c := b[len(b)-1]; c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			// strtod overflows to ±HUGE_VAL with ERANGE, which Redis
			// refuses; underflow to 0 too.
			return 0, false
		}
		return 0, false
	}
	if math.IsNaN(f) {
		return 0, false
	}
	// Go accepts hexadecimal mantissas with 'p' exponents and
	// underscores, as strtod does not quite; refuse underscores.
	for _, c := range b {
		if c == '_' {
			return 0, false
		}
	}
	return f, true
}

// ParseLongDouble parses b as Redis's string2ld does (strtold, the whole
// string, no leading space, NaN and out-of-range values refused), into a
// float of the x87 long double's 64-bit mantissa, so HINCRBYFLOAT computes
// what redis-server computes on x86-64.
func ParseLongDouble(b []byte) (*big.Float, bool) {
	if len(b) == 0 || len(b) >= 5*1024 || isSpace(b[0]) {
		return nil, false
	}
	for _, c := range b {
		if c == '_' || c == 0 || isSpace(c) {
			return nil, false
		}
	}
	s := string(b)
	low := strings.ToLower(strings.TrimLeft(s, "+-"))
	if low == "inf" || low == "infinity" {
		return new(big.Float).SetInf(s[0] == '-'), true
	}
	if strings.HasPrefix(low, "nan") || strings.HasPrefix(low, "inf") {
		return nil, false
	}
	f, _, err := big.ParseFloat(s, 0, 64, big.ToNearestEven)
	if err != nil || !longDoubleRange(f) {
		return nil, false
	}
	return f, true
}

// longDoubleRange reports whether a finite f is within a long double's
// exponent range (and not an underflow to zero from a non-zero input).
func longDoubleRange(f *big.Float) bool {
	if f.IsInf() {
		return false
	}
	return f.Sign() == 0 || f.MantExp(nil) <= 16384 && f.MantExp(nil) > -16445
}

// AddLongDouble returns a+b rounded to a long double, or false when the
// sum overflows it.
func AddLongDouble(a, b *big.Float) (*big.Float, bool) {
	s := new(big.Float).SetPrec(64).SetMode(big.ToNearestEven).Add(a, b)
	if s.IsInf() || s.Sign() != 0 && s.MantExp(nil) > 16384 {
		return nil, false
	}
	return s, true
}

// FormatLongDouble appends f as Redis's INCRBYFLOAT and HINCRBYFLOAT print
// it (ld2string's human-friendly form: "%.17Lf", trailing zeros and point
// trimmed, "-0" as "0").
func FormatLongDouble(b []byte, f *big.Float) []byte {
	start := len(b)
	b = f.Append(b, 'f', 17)
	end := len(b)
	if indexByte(b[start:], '.') >= 0 {
		for end > start && b[end-1] == '0' {
			end--
		}
		if end > start && b[end-1] == '.' {
			end--
		}
	}
	b = b[:end]
	if string(b[start:]) == "-0" {
		b = append(b[:start], '0')
	}
	return b
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// FormatScore appends a score as redis-server 7.0 prints a double
// (addReplyDouble: "%.17g", "inf" and "-inf").
func FormatScore(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "inf"...)
	case math.IsInf(v, -1):
		return append(b, "-inf"...)
	}
	return appendG17(b, v)
}

// appendG17 is C's printf("%.17g", v) for a finite v.
func appendG17(b []byte, v float64) []byte {
	if v == 0 {
		if math.Signbit(v) {
			return append(b, "-0"...)
		}
		return append(b, '0')
	}
	// %g: exponent X of %e with precision P-1; if P > X >= -4 use %f with
	// precision P-1-X, else %e with precision P-1; then trailing zeros
	// removed.
	e := strconv.AppendFloat(nil, v, 'e', 16, 64)
	// exponent after 'e'
	k := len(e) - 1
	for e[k] != 'e' {
		k--
	}
	x, _ := strconv.Atoi(string(e[k+1:]))
	if x < 17 && x >= -4 {
		f := strconv.AppendFloat(nil, v, 'f', 16-x, 64)
		if i := indexByte(f, '.'); i >= 0 {
			end := len(f)
			for end > i && f[end-1] == '0' {
				end--
			}
			if end-1 == i {
				end--
			}
			f = f[:end]
		}
		return append(b, f...)
	}
	mant := e[:k]
	if i := indexByte(mant, '.'); i >= 0 {
		end := len(mant)
		for end > i && mant[end-1] == '0' {
			end--
		}
		if end-1 == i {
			end--
		}
		mant = mant[:end]
	}
	b = append(b, mant...)
	b = append(b, 'e')
	if x < 0 {
		b = append(b, '-')
		x = -x
	} else {
		b = append(b, '+')
	}
	if x < 10 {
		b = append(b, '0')
	}
	return strconv.AppendInt(b, int64(x), 10)
}

func indexByte(b []byte, c byte) int {
	for i := range b {
		if b[i] == c {
			return i
		}
	}
	return -1
}

// hashColl is a hash in either representation: a smallHash, or a hashVal
// once it outgrows it. A record is what get returns: a record number of a
// hashVal, an offset of a smallHash.
type hashColl interface {
	collection
	get(f []byte) (rec uint32, ok bool)
	set(f, v []byte) bool
	del(f []byte) bool
	keyAt(rec uint32) []byte
	val(rec uint32) []byte
	each(fn func(rec uint32))
}

func (h *hashVal) get(f []byte) (uint32, bool) {
	_, rec, ok := h.find(f)
	return rec, ok
}

// smallHash is a hash of at most smallHashFields fields and
// smallHashBytes bytes: its fields and values packed in one byte slice,
// each a uvarint length and its bytes, in insertion order, found by a
// scan (as redis-server's listpack keeps a small hash). A token bucket's
// hash of two fields costs its entry, this header and one allocation.
type smallHash struct {
	b []byte
}

const (
	smallHashFields = bdictMin
	smallHashBytes  = 512
)

func (h *smallHash) next(off uint32) (uint32, []byte) {
	n, w := binary.Uvarint(h.b[off:])
	start := off + uint32(w)
	return start + uint32(n), h.b[start : start+uint32(n)]
}

func (h *smallHash) keyAt(rec uint32) []byte { _, f := h.next(rec); return f }
func (h *smallHash) val(rec uint32) []byte {
	end, _ := h.next(rec)
	_, v := h.next(end)
	return v
}

func (h *smallHash) each(fn func(rec uint32)) {
	for off := uint32(0); off < uint32(len(h.b)); {
		end, _ := h.next(off)
		next, _ := h.next(end)
		fn(off)
		off = next
	}
}

func (h *smallHash) size() int {
	n := 0
	h.each(func(uint32) { n++ })
	return n
}

func (h *smallHash) dataBytes() int64 {
	d := int64(0)
	h.each(func(rec uint32) { d += int64(len(h.keyAt(rec))+len(h.val(rec))) + hashElemCost })
	return d
}

func (h *smallHash) get(f []byte) (uint32, bool) {
	for off := uint32(0); off < uint32(len(h.b)); {
		end, k := h.next(off)
		next, _ := h.next(end)
		if string(k) == string(f) {
			return off, true
		}
		off = next
	}
	return 0, false
}

// set sets f to v in place (the rest moved), or appends it.
func (h *smallHash) set(f, v []byte) bool {
	rec, ok := h.get(f)
	if !ok {
		h.b = binary.AppendUvarint(h.b, uint64(len(f)))
		h.b = append(h.b, f...)
		h.b = binary.AppendUvarint(h.b, uint64(len(v)))
		h.b = append(h.b, v...)
		return true
	}
	end, _ := h.next(rec)
	next, _ := h.next(end)
	nb := make([]byte, 0, len(h.b)-int(next-end)+uvarintLen(uint64(len(v)))+len(v))
	nb = append(nb, h.b[:end]...)
	nb = binary.AppendUvarint(nb, uint64(len(v)))
	nb = append(nb, v...)
	h.b = append(nb, h.b[next:]...)
	return false
}

func (h *smallHash) del(f []byte) bool {
	rec, ok := h.get(f)
	if !ok {
		return false
	}
	end, _ := h.next(rec)
	next, _ := h.next(end)
	h.b = append(h.b[:rec], h.b[next:]...)
	if len(h.b) == 0 {
		h.b = nil
	}
	return true
}

// hashFor returns h, or h converted to a hashVal when adding elems fields
// and bytes bytes would outgrow a smallHash; c's collection is replaced.
func (c *collCtx) hashFor(h hashColl, elems int, bytes int64) hashColl {
	sh, ok := h.(*smallHash)
	if !ok || c.n0+elems <= smallHashFields && int64(len(sh.b))+bytes+int64(4*elems) <= smallHashBytes {
		return h
	}
	big := &hashVal{}
	sh.each(func(rec uint32) { big.set(sh.keyAt(rec), sh.val(rec)) })
	c.s.colls.objs[c.s.entry(c.idx).b] = big
	c.obj = big
	return big
}
