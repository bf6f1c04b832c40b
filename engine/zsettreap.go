package engine

import (
	"bytes"
	"math/rand/v2"
)

// The sorted set's structure (zsets.go has its ops): the members' records
// packed into one byte arena, the index member -> record, and the treap
// of the records ordered by (score, member), each node counting its
// subtree, so that an update, a rank or the n-th member costs O(log n).

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
	rec := slot(&z.recs, &z.free)
	z.recs[rec] = r
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

// reindex rebuilds the index (none for a small sorted set).
func (z *zsetVal) reindex() {
	z.idx.reindex(z, z.n, len(z.recs), func(i int) bool { return z.recs[i].mlen != holeLen })
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
