package engine

import (
	"bytes"

	"github.com/cespare/xxhash/v2"
)

// The hash index: open addressing over uint32 slots with linear probing and
// backward-shift deletion (no tombstones), grown at 0.8 load and shrunk below
// 0.1.
//
// Let hi be the upper 32 bits of the key's xxhash (the lower bits chose the
// stripe). A slot holds hi's top 32-ib bits (the tag) above entry index + 1 in
// its low ib bits, 0 meaning empty; ib is wide enough for every index of the
// slab and only grows. A key's home position is hi's top capBits bits. While
// capBits+ib <= 32 the tag contains the home, so rehashing and deleting never
// read a key; a probe compares keys only when the tag matches.

const minSlots = 16

func (s *stripe) tagMask() uint32 { return ^uint32(0) << s.ib }

// find looks key up. On a hit it returns the key's slot position and entry
// index; on a miss, the empty position where it would be inserted (valid only
// when the table is non-empty and does not need to grow).
func (s *stripe) find(hi uint32, key []byte) (pos, idx uint32, ok bool) {
	if len(s.slots) == 0 {
		return 0, 0, false
	}
	mask := uint32(len(s.slots) - 1)
	tm := s.tagMask()
	want := hi & tm
	pos = hi >> (32 - s.capBits)
	for {
		sl := s.slots[pos]
		if sl == 0 {
			return pos, 0, false
		}
		if sl&tm == want {
			idx = sl&^tm - 1
			if bytes.Equal(s.keyOf(s.entry(idx)), key) {
				return pos, idx, true
			}
		}
		pos = (pos + 1) & mask
	}
}

// touchSlot loads and returns the index slot at hi's home position (see
// Engine.decideRun). It changes nothing.
func (s *stripe) touchSlot(hi uint32) uint32 {
	if len(s.slots) == 0 {
		return 0
	}
	return s.slots[hi>>(32-s.capBits)]
}

// touchEntry finds the first slot of hi's probe run whose tag is hi's, and
// loads both ends of the entry it names (a 48-byte entry may straddle two
// cache lines); when the run ends first, the key is new and it loads the
// entry the key would take (touchFree). It returns what it loaded (see
// Engine.decideRun) and changes nothing. The slots are expected in cache.
// It compares tags, not keys: find's key comparison would branch on entry
// bytes still on their way, and measured 20% slower in
// BenchmarkEngineApplyParallel (a wrong guess only loads another entry).
func (s *stripe) touchEntry(hi uint32) uint32 {
	if len(s.slots) == 0 {
		return 0
	}
	mask := uint32(len(s.slots) - 1)
	tm := s.tagMask()
	want := hi & tm
	for pos := hi >> (32 - s.capBits); ; pos = (pos + 1) & mask {
		sl := s.slots[pos]
		if sl == 0 {
			return s.touchFree()
		}
		if sl&tm == want {
			idx := sl&^tm - 1
			pg := s.pages[idx>>pageBits]
			if pg == nil {
				return 0
			}
			e := &pg[idx&(pageSize-1)]
			return uint32(e.a) + uint32(e.kbuf[inlineKey-1])
		}
	}
}

// touchFree loads the entry that allocEntry would hand out next, which a
// key not found is likely to take, and returns what it loaded (0 when there
// is none). It changes nothing.
func (s *stripe) touchFree() uint32 {
	n := len(s.avail)
	if n == 0 {
		return 0
	}
	pg := s.avail[n-1]
	p, m := s.pages[pg], &s.meta[pg]
	if p == nil {
		return 0
	}
	slot := uint32(m.fresh)
	if m.free != 0 {
		slot = uint32(m.free - 1)
	}
	if slot >= pageSize {
		return 0
	}
	return uint32(p[slot].a)
}

// home returns the home position of the key in slot value sl.
func (s *stripe) home(sl uint32) uint32 {
	if int(s.capBits)+int(s.ib) <= 32 {
		return sl >> (32 - s.capBits)
	}
	idx := sl&^s.tagMask() - 1
	hi := hiHash(xxhash.Sum64(s.keyOf(s.entry(idx))))
	return hi >> (32 - s.capBits)
}

// needGrow reports whether one more key would pass the maximum load.
func (s *stripe) needGrow() bool {
	return len(s.slots) == 0 || (s.count.Load()+1)*5 > int64(len(s.slots))*4
}

// resize rebuilds the slots with n (a power of two) positions.
func (s *stripe) resize(n int) {
	old := s.slots
	s.slots = make([]uint32, n)
	capBits := uint8(0)
	for 1<<capBits < n {
		capBits++
	}
	s.capBits = capBits
	mask := uint32(n - 1)
	for _, sl := range old {
		if sl == 0 {
			continue
		}
		p := s.home(sl)
		for s.slots[p] != 0 {
			p = (p + 1) & mask
		}
		s.slots[p] = sl
	}
}

// retag widens the index field to ib bits; the tags lose their low bits.
func (s *stripe) retag(ib uint8) {
	oldTag := s.tagMask()
	s.ib = ib
	newTag := s.tagMask()
	for i, sl := range s.slots {
		if sl != 0 {
			s.slots[i] = sl&newTag | sl&^oldTag
		}
	}
}

// deleteSlot empties position pos, shifting back the probe run behind it.
func (s *stripe) deleteSlot(pos uint32) {
	mask := uint32(len(s.slots) - 1)
	i, j := pos, pos
	for {
		j = (j + 1) & mask
		sl := s.slots[j]
		if sl == 0 {
			break
		}
		k := s.home(sl)
		// Leave sl where it is if its home lies cyclically in (i, j].
		if i <= j {
			if i < k && k <= j {
				continue
			}
		} else if i < k || k <= j {
			continue
		}
		s.slots[i] = sl
		i = j
	}
	s.slots[i] = 0
}
