package engine

import (
	"encoding/binary"
	"math"
)

// A hash's two representations (hashes.go has its ops): smallHash, its
// fields packed in one byte slice and found by a scan, as redis-server's
// listpack keeps a small hash, and hashVal, an arena with an index, which
// a hash becomes once it outgrows the small one (hashFor).

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
	h.idx.reindex(h, h.n, len(h.recs), func(i int) bool { return h.recs[i].flen != holeLen })
}

// each calls f for every field in insertion order.
func (h *hashVal) each(f func(rec uint32)) {
	for i := range h.recs {
		if h.recs[i].flen != holeLen {
			f(uint32(i))
		}
	}
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
