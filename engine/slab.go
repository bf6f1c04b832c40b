package engine

import (
	"encoding/binary"
	"math/bits"
)

// The entry slab: fixed-size (48-byte), pointer-free entries in pages of pageSize,
// addressed by a uint32 index (page<<pageBits | slot) that never changes
// while the key lives, so SCAN cursors can name positions. The garbage
// collector does not scan the pages (they hold no pointers).
//
// Each page has its own free chain and live count; pages with a free slot
// are on the stripe's avail stack. A page whose last entry is freed is
// released to the allocator (its number stays, on the avail stack), so memory
// follows live keys up to page granularity.

const (
	pageBits = 8
	pageSize = 1 << pageBits
)

// entry is one key's slot (48 bytes). a, b and c are the algorithm's state
// words (RL.LOG keeps its ring id in a). rule is the interned rule id; 0
// marks a free slot, whose a then links the page's free chain as slot+1. A
// key of up to inlineKey bytes is stored in the entry itself (klen bytes of
// kbuf), sparing a cache miss per lookup; a longer one lives in the stripe's
// arena (klen == arenaKey, reference in kbuf[:4]).
type entry struct {
	a, b, c int64
	rule    uint32
	klen    uint8
	kbuf    [inlineKey]byte
}

const (
	inlineKey = 19
	arenaKey  = 0xff
)

// keyOf returns e's key bytes, aliasing the entry or the arena.
func (s *stripe) keyOf(e *entry) []byte {
	if e.klen != arenaKey {
		return e.kbuf[:e.klen]
	}
	return s.arena.key(e.arenaRef())
}

func (e *entry) arenaRef() uint32 { return binary.LittleEndian.Uint32(e.kbuf[:4]) }

// setKey stores key in e, inline or in the arena.
func (s *stripe) setKey(e *entry, key []byte) {
	if len(key) <= inlineKey {
		e.klen = uint8(copy(e.kbuf[:], key))
		return
	}
	e.klen = arenaKey
	binary.LittleEndian.PutUint32(e.kbuf[:4], s.arena.add(key))
}

type page [pageSize]entry

// pageMeta tracks one page's occupancy.
type pageMeta struct {
	live  uint16 // live entries (<= pageSize)
	fresh uint16 // slots [fresh, pageSize) were never handed out
	free  uint16 // head of the free chain, slot+1 (0: empty)
	avail bool   // on the stripe's avail stack
}

// entry returns the entry at idx, which must be allocated.
func (s *stripe) entry(idx uint32) *entry {
	return &s.pages[idx>>pageBits][idx&(pageSize-1)]
}

// allocEntry hands out a zeroed entry's index. It may add a page, and then
// widen the index field of the hash slots (retag).
func (s *stripe) allocEntry() uint32 {
	for {
		if n := len(s.avail); n > 0 {
			pg := s.avail[n-1]
			m := &s.meta[pg]
			if s.pages[pg] == nil {
				s.pages[pg] = new(page)
				*m = pageMeta{avail: true}
			}
			if m.live < pageSize {
				var slot uint32
				if m.free != 0 {
					slot = uint32(m.free - 1)
					e := &s.pages[pg][slot]
					m.free = uint16(e.a)
					*e = entry{}
				} else {
					slot = uint32(m.fresh)
					m.fresh++
				}
				m.live++
				return pg<<pageBits | slot
			}
			m.avail = false
			s.avail = s.avail[:n-1]
			continue
		}
		pg := uint32(len(s.pages))
		s.pages = append(s.pages, new(page))
		s.meta = append(s.meta, pageMeta{avail: true})
		s.avail = append(s.avail, pg)
		if ib := uint8(bits.Len32(uint32(len(s.pages)) << pageBits)); ib > s.ib {
			s.retag(ib)
		}
	}
}

// freeEntry returns idx to its page; a page left empty is released.
func (s *stripe) freeEntry(idx uint32) {
	pg, slot := idx>>pageBits, idx&(pageSize-1)
	m := &s.meta[pg]
	m.live--
	if m.live == 0 {
		s.pages[pg] = nil
		m.free, m.fresh = 0, 0
	} else {
		s.pages[pg][slot] = entry{a: int64(m.free)}
		m.free = uint16(slot + 1)
	}
	if !m.avail {
		m.avail = true
		s.avail = append(s.avail, pg)
	}
}

// slotsEnd is one past the largest entry index the slab can hold.
func (s *stripe) slotsEnd() uint32 { return uint32(len(s.pages)) << pageBits }

// slot returns an index of *xs to fill: the last of the free list *free,
// or a new zero element's. The slabs of values, collections, logs, lease
// sets and rules, and a sorted set's records, reuse their indices so.
func slot[T any](xs *[]T, free *[]uint32) uint32 {
	if n := len(*free); n > 0 {
		id := (*free)[n-1]
		*free = (*free)[:n-1]
		return id
	}
	var zero T
	*xs = append(*xs, zero)
	return uint32(len(*xs) - 1)
}
