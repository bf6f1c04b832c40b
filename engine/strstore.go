package engine

import (
	"math"

	"github.com/cespare/xxhash/v2"
)

// Where string keys live (strings.go has their ops): the stripe's slab of
// values, and its expiry heap, a binary min-heap of the string and
// collection keys that have an expiry, which every string op drains at
// its own time (strDrain) and Sweep drains on every stripe
// (drainExpired).

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
	id := slot(&v.vals, &v.free)
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
