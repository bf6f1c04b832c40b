package engine

import (
	"fmt"
	"math"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// Collections: hashes (hashes.go), sorted sets (zsets.go) and lists
// (lists.go), the Redis types limiter scripts keep their state in
// (docs/design.md, "Collections"). A collection key is a value key as a
// string is: the entry's word a is its expiry in ms (0: none), b its
// collection's id in the stripe's collSlab, c its place in the stripe's
// expiry heap (strstore.go), so expiry is on the log's clock and drained
// the way strings' is. A collection is never empty: an op that empties it
// removes its key, as Redis does.
//
// Each collection packs its elements' bytes into one byte arena of its own
// with small fixed-size records pointing into it, rather than a []byte per
// element, so an element costs its bytes plus about 20 bytes.

// collSlab holds a stripe's collections; elems and bytes sum their
// elements and their accounted bytes (memory.go).
type collSlab struct {
	objs  []collection
	free  []uint32
	elems int64
	bytes int64
}

// collection is one key's hash, sorted set or list.
type collection interface {
	// size is the number of elements.
	size() int
	// dataBytes is the accounted bytes of the elements, a function of
	// the elements alone (not of the allocation history), so replicas
	// holding the same elements account the same bytes.
	dataBytes() int64
}

// Per-element accounting: the record pointing into the arena and its
// share of the index, beside the element's bytes (dataBytes).
const (
	// collCost is a collection key's cost beyond its entry: its slab
	// slot, heap slot and the collection's header.
	collCost = 48
	// hashElemCost, zsetElemCost, listElemCost: one element's record.
	hashElemCost = 20
	zsetElemCost = 40
	listElemCost = 8
)

// DefaultMaxCollectionLen is Config.MaxCollectionLen's default.
const DefaultMaxCollectionLen = 1_000_000

// maxCollBytes bounds one collection's accounted bytes (its arena's
// offsets are 32 bits).
const maxCollBytes = 1 << 31

func (c *collSlab) alloc(o collection) uint32 {
	id := slot(&c.objs, &c.free)
	c.objs[id] = o
	c.elems += int64(o.size())
	c.bytes += o.dataBytes()
	return id
}

func (c *collSlab) release(id uint32) {
	o := c.objs[id]
	c.elems -= int64(o.size())
	c.bytes -= o.dataBytes()
	c.objs[id] = nil
	c.free = append(c.free, id)
}

func (c *collSlab) live() int64 { return int64(len(c.objs) - len(c.free)) }

// isValueKind reports whether k's keys keep their state as a value with
// an expiry (strings and collections): the EXPIRE family applies to them.
func isValueKind(k Kind) bool {
	sh := kindOf(k).shape
	return sh == inValue || sh == inColl
}

// elemCost is one element's record cost for kind k.
func elemCost(k Kind) int64 {
	switch k {
	case KindHash:
		return hashElemCost
	case KindZSet:
		return zsetElemCost
	}
	return listElemCost
}

// collCtx is what a collection op works on: the stripe (locked), the key's
// slot position and entry, and the key's collection (nil when absent).
type collCtx struct {
	e    *Engine
	s    *stripe
	now  int64
	hi   uint32
	op   *Op
	pos  uint32
	idx  uint32
	kind Kind // the wanted kind
	obj  collection
	// n0 and b0 are the collection's size and bytes before the op, for
	// the slab's totals.
	n0 int
	b0 int64
}

// collApply is every collection op's applyFunc: the op on its key's
// stripe, and again on exact figures when it found no room (as strOp).
func collApply(e *Engine, _, now int64, op *Op, res *Result) {
	*res = e.collOp(now, op)
	if res.Err == errNoRoom {
		*res = e.collOpFull(now, op)
	}
}

// collOp runs one collection op on its key's stripe.
func (e *Engine) collOp(now int64, op *Op) Result {
	hi, s := e.lock(op.Key)
	defer e.unlk(s)
	s.strDrain(e.countedAt(now))
	return e.collOpLocked(now, hi, s, op)
}

// collOpFull is collOp once the held totals left no room: as strOpFull.
func (e *Engine) collOpFull(now int64, op *Op) Result {
	e.reclaimAll(now)
	hi, s := e.lock(op.Key)
	defer e.unlk(s)
	s.final = true
	res := e.collOpLocked(now, hi, s, op)
	s.final = false
	return res
}

func (e *Engine) collOpLocked(now int64, hi uint32, s *stripe, op *Op) Result {
	kind := collKindOf(op.Code)
	pos, idx, k := s.strLookup(now, hi, op.Key)
	if k != KindNone && k != kind {
		return Result{Err: ErrWrongTypeValue}
	}
	c := collCtx{e: e, s: s, now: now, hi: hi, op: op, pos: pos, idx: idx, kind: kind}
	if k == kind {
		c.obj = s.colls.objs[s.entry(idx).b]
		c.n0, c.b0 = c.obj.size(), c.obj.dataBytes()
	}
	var res Result
	switch kind {
	case KindHash:
		res = c.hashOp()
	case KindZSet:
		res = c.zsetOp()
	case KindList:
		res = c.listOp()
	default:
		res = Result{Err: badRule("unknown operation code %d", op.Code)}
	}
	c.settle()
	return res
}

// collKindOf is the kind an op code works on.
func collKindOf(c OpCode) Kind {
	switch {
	case c >= 60 && c < 80:
		return KindHash
	case c >= 80 && c < 100:
		return KindZSet
	case c >= 100 && c < 120:
		return KindList
	}
	return KindNone
}

// room reports whether the op may add elems elements of bytes bytes:
// within max-collection-len, and, when it creates the key or grows it,
// within the memory limit (errNoRoom asks the caller to reclaim and run
// the op again, as for strings). It changes nothing.
func (c *collCtx) room(elems int, bytes int64) error {
	add := int64(elems)*elemCost(c.kind) + bytes
	// The arena's offsets are 32 bits: a collection stays within 2 GiB
	// of elements whatever the bounds multiply to.
	if c.n0+elems > c.e.maxColl || c.b0+add > maxCollBytes {
		return &errcode.Error{Code: errcode.CollectionTooLarge, Num: int64(c.e.maxColl)}
	}
	if c.obj == nil {
		return c.s.roomExtra(c.op.Key, c.kind, 0, add)
	}
	t := c.s.tot
	if t == nil || t.maxBytes == 0 || elems <= 0 {
		return nil
	}
	if t.bytes.Load()+add > t.maxBytes {
		if c.s.final {
			return ErrOOM
		}
		return errNoRoom
	}
	return nil
}

// create makes the key with a new collection o (the op then fills it).
func (c *collCtx) create(o collection) {
	id := c.s.colls.alloc(o)
	c.idx = c.s.insert(c.pos, c.hi, c.op.Key, Rule{Kind: c.kind}, state{b: int64(id)})
	c.obj = o
}

// settle brings the slab's totals up to date after the op and removes the
// key if the op emptied its collection.
func (c *collCtx) settle() {
	if c.obj == nil {
		return
	}
	n, b := c.obj.size(), c.obj.dataBytes()
	c.s.colls.elems += int64(n - c.n0)
	c.s.colls.bytes += b - c.b0
	if n == 0 {
		c.s.removeIdx(c.idx)
		c.obj = nil
		return
	}
	c.s.account()
}

// the argument helpers of the collection ops: Args are checked by the
// server, and again here since they are replicated.

func (c *collCtx) argInt(i int) (int64, bool) {
	if i >= len(c.op.Args) {
		return 0, false
	}
	return ParseInt(c.op.Args[i])
}

// tooLong checks that every element argument from i on, by step, is within
// max-value-len.
func (c *collCtx) tooLong(from, step int) error {
	for i := from; i < len(c.op.Args); i += step {
		if err := c.e.valueTooLong(len(c.op.Args[i])); err != nil {
			return err
		}
	}
	return nil
}

// copyValues copies elements into one buffer and returns them as the
// result's Values (the result owns them; no lock is held while they are
// written to a client).
type valuesBuilder struct {
	buf  []byte
	ends []int // end offset of each value; -1 for nil
}

func (v *valuesBuilder) add(b []byte) {
	if v.buf == nil {
		v.buf = make([]byte, 0, 64) // an empty value is not nil
	}
	v.buf = append(v.buf, b...)
	v.ends = append(v.ends, len(v.buf))
}

func (v *valuesBuilder) addNil() { v.ends = append(v.ends, -1) }

func (v *valuesBuilder) values() [][]byte {
	out := make([][]byte, len(v.ends))
	start := 0
	for i, end := range v.ends {
		if end < 0 {
			continue
		}
		out[i] = v.buf[start:end:end]
		start = end
	}
	return out
}

// bdict is an open-addressing index (linear probing) of a collection's
// elements by their bytes: each slot holds an element's record index + 1
// (0: empty). A collection of at most bdictMin elements has no index and
// is searched linearly.
type bdict struct {
	slots []uint32
}

const bdictMin = 8

// keyer gives an element's bytes by its record index.
type keyer interface {
	keyAt(i uint32) []byte
}

func hashBytes(b []byte) uint64 { return xxhash.Sum64(b) }

// find returns the slot of key (found) or of the empty slot where it would
// go; the table must exist.
func (d *bdict) find(k keyer, key []byte) (slot int, rec uint32, found bool) {
	mask := len(d.slots) - 1
	i := int(hashBytes(key)) & mask
	for {
		v := d.slots[i]
		if v == 0 {
			return i, 0, false
		}
		if string(k.keyAt(v-1)) == string(key) {
			return i, v - 1, true
		}
		i = (i + 1) & mask
	}
}

// add indexes record rec (whose key is absent), growing the table.
func (d *bdict) add(k keyer, rec uint32, n int) {
	if d.slots == nil {
		return
	}
	if (n+1)*4 > len(d.slots)*3 {
		d.rebuildSize(k, nil, len(d.slots)*2)
	}
	slot, _, _ := d.find(k, k.keyAt(rec))
	d.slots[slot] = rec + 1
}

// del removes the key at slot (backward-shift deletion).
func (d *bdict) del(k keyer, slot int) {
	mask := len(d.slots) - 1
	i := slot
	for {
		d.slots[i] = 0
		j := i
		for {
			j = (j + 1) & mask
			v := d.slots[j]
			if v == 0 {
				return
			}
			home := int(hashBytes(k.keyAt(v-1))) & mask
			// v may move to i if its home is not in (i, j] cyclically.
			if i <= j && (home <= i || home > j) || i > j && home <= i && home > j {
				d.slots[i] = v
				i = j
				break
			}
		}
	}
}

// reindex rebuilds d over the n live records among the first recs (live
// says which): no index at all for a collection of at most bdictMin
// members, which is searched by a scan.
func (d *bdict) reindex(k keyer, n, recs int, live func(i int) bool) {
	if n <= bdictMin {
		d.slots = nil
		return
	}
	idx := make([]uint32, 0, n)
	for i := range recs {
		if live(i) {
			idx = append(idx, uint32(i))
		}
	}
	d.rebuildSize(k, idx, tableSize(n))
}

// rebuildSize re-indexes the live records recs (nil: those already
// indexed) in a table of size slots.
func (d *bdict) rebuildSize(k keyer, recs []uint32, size int) {
	old := d.slots
	d.slots = make([]uint32, size)
	mask := size - 1
	put := func(rec uint32) {
		i := int(hashBytes(k.keyAt(rec))) & mask
		for d.slots[i] != 0 {
			i = (i + 1) & mask
		}
		d.slots[i] = rec + 1
	}
	if recs != nil {
		for _, r := range recs {
			put(r)
		}
		return
	}
	for _, v := range old {
		if v != 0 {
			put(v - 1)
		}
	}
}

// tableSize is the index size for n elements (load at most 3/4).
func tableSize(n int) int {
	size := 16
	for size*3 < n*4+4 {
		size *= 2
	}
	return size
}

// zsetOp and listOp: zsets.go, lists.go.

// exportColl fills a record's elements from collection o (copies).
func exportColl(o collection, rec *Record) {
	switch v := o.(type) {
	case hashColl:
		rec.Elems = make([][]byte, 0, 2*v.size())
		v.each(func(i uint32) {
			rec.Elems = append(rec.Elems, slices.Clone(v.keyAt(i)), slices.Clone(v.val(i)))
		})
	case *zsetVal:
		rec.Elems = make([][]byte, 0, v.size())
		rec.Scores = make([]float64, 0, v.size())
		v.each(func(i uint32) {
			rec.Elems = append(rec.Elems, slices.Clone(v.keyAt(i)))
			rec.Scores = append(rec.Scores, v.recs[i].score)
		})
	case *listVal:
		rec.Elems = make([][]byte, 0, v.size())
		for i := range v.size() {
			rec.Elems = append(rec.Elems, slices.Clone(v.at(i)))
		}
	}
}

// importColl is Import for a collection record: no rule parameters, A the
// expiry (ms, 0 for none), B and C zero, at least one element, each at
// most maxValueLenCap bytes; a hash's fields and a sorted set's members
// distinct, scores not NaN. A record expired at the clock's time adds
// nothing.
func (e *Engine) importColl(rec Record) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("import key %q: %w", rec.Key, badRule(format, args...))
	}
	k := rec.Rule.Kind
	switch {
	case rec.Rule != Rule{Kind: k}:
		return bad("%s rule with parameters %d, %d", k, rec.Rule.Limit, rec.Rule.Period)
	case rec.A < 0 || rec.B != 0 || rec.C != 0:
		return bad("%s state (%d, %d, %d)", k, rec.A, rec.B, rec.C)
	case len(rec.Log) != 0 || len(rec.Leases) != 0 || len(rec.Value) != 0:
		return bad("timestamps, leases or a value given for a %s", k)
	case len(rec.Elems) == 0:
		return bad("an empty %s", k)
	case k == KindHash && len(rec.Elems)%2 != 0:
		return bad("a hash of %d fields and values", len(rec.Elems))
	case k == KindZSet && len(rec.Scores) != len(rec.Elems):
		return bad("a sorted set of %d members and %d scores", len(rec.Elems), len(rec.Scores))
	case k != KindZSet && len(rec.Scores) != 0:
		return bad("scores given for a %s", k)
	}
	for _, el := range rec.Elems {
		if len(el) > maxValueLenCap {
			return bad("an element of %d bytes", len(el))
		}
	}
	var o collection
	switch k {
	case KindHash:
		var h hashColl = &smallHash{}
		size := 0
		for _, el := range rec.Elems {
			size += len(el) + 2
		}
		if len(rec.Elems)/2 > smallHashFields || size > smallHashBytes {
			h = &hashVal{}
		}
		for i := 0; i < len(rec.Elems); i += 2 {
			if !h.set(rec.Elems[i], rec.Elems[i+1]) {
				return bad("field %q twice", rec.Elems[i])
			}
		}
		o = h
	case KindZSet:
		z := &zsetVal{}
		for i, m := range rec.Elems {
			if math.IsNaN(rec.Scores[i]) {
				return bad("a NaN score")
			}
			if _, _, ok := z.find(m); ok {
				return bad("member %q twice", m)
			}
			z.insert(m, rec.Scores[i])
		}
		o = z
	case KindList:
		l := &listVal{}
		for _, el := range rec.Elems {
			l.push(el, false)
		}
		o = l
	}
	hi, s, pos := e.lockCleared(rec.Key)
	defer e.unlk(s)
	id := s.colls.alloc(o)
	idx := s.insert(pos, hi, rec.Key, Rule{Kind: k}, state{b: int64(id)})
	if rec.A != 0 {
		s.setExpiry(idx, rec.A)
	}
	s.reclaimedAt = math.MinInt64
	s.account()
	return nil
}

// firstTimes reports, for each element of args from index from by step,
// whether it is the first occurrence of its bytes there (HSET's fields,
// ZADD's members named twice count once): a map for long lists, so a
// command of n elements costs O(n), not O(n^2).
func firstTimes(args [][]byte, from, step int) []bool {
	out := make([]bool, len(args))
	if (len(args)-from)/step <= 16 {
		for i := from; i < len(args); i += step {
			out[i] = true
			for j := from; j < i; j += step {
				if string(args[j]) == string(args[i]) {
					out[i] = false
					break
				}
			}
		}
		return out
	}
	seen := make(map[string]struct{}, (len(args)-from)/step)
	for i := from; i < len(args); i += step {
		if _, dup := seen[string(args[i])]; !dup {
			seen[string(args[i])] = struct{}{}
			out[i] = true
		}
	}
	return out
}
