package engine

import (
	"encoding/binary"
	"math"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// stripe is one lock stripe: the keys whose hash's low bits select it, with
// their entries, hash index, key arena, interned rules, RL.LOG rings and lease sets. Every
// field but count is guarded by mu; count is also read without it.
type stripe struct {
	mu sync.Mutex

	idx int // the stripe's index in Engine.stripes (scripttx.go)

	count atomic.Int64 // keys with state (written under mu)

	// Limits (memory.go): tot is the engine's totals, nil without limits;
	// accKeys and accBytes are what the stripe last added to them;
	// reclaimedAt is the quantum in which the held state was last made
	// exactly the counted state; final marks the second asking of room.
	tot         *totals
	watch       Watcher     // Config.Watcher: told of every removal
	wt          *watchTable // the engine's WATCH registrations: told of every removal
	db          uint8       // the database of the stripe's keys
	accKeys     int64
	accBytes    int64
	reclaimedAt int64
	final       bool
	approved    bool // RL.ALL checked the room of its creations already (all.go)

	// slab (slab.go)
	pages []*page
	meta  []pageMeta
	avail []uint32

	// hash index (table.go)
	slots   []uint32
	capBits uint8 // len(slots) == 1<<capBits
	ib      uint8 // width of the entry-index field of a slot

	arena  arena     // arena.go
	rules  ruleTable // rules.go
	logs   logSlab   // log.go
	leases leaseSlab // concurrency.go
	strs   strSlab   // strstore.go
	colls  collSlab  // colls.go

	_ [64]byte // keep neighbouring stripes' locks off this cache line
}

func newStripe(tot *totals) *stripe {
	s := &stripe{tot: tot}
	s.reset()
	return s
}

// state is a copy of an entry's state words.
type state struct{ a, b, c int64 }

// insert adds key with rule and state. pos is find's miss position for hi.
func (s *stripe) insert(pos, hi uint32, key []byte, rule Rule, st state) uint32 {
	if s.needGrow() {
		s.resize(max(minSlots, 2*len(s.slots)))
		pos, _, _ = s.find(hi, key)
	}
	idx := s.allocEntry()
	e := s.entry(idx)
	e.a, e.b, e.c = st.a, st.b, st.c
	e.rule = s.rules.acquire(rule)
	s.setKey(e, key)
	s.slots[pos] = hi&s.tagMask() | (idx + 1)
	s.count.Add(1)
	s.account()
	return idx
}

// remove forgets the key at slot position pos and entry idx.
func (s *stripe) remove(pos, idx uint32) {
	s.deleteSlot(pos)
	e := s.entry(idx)
	if s.watch != nil {
		s.watch.KeyChanged(s.keyOf(e))
	}
	if s.wt != nil && s.wt.active() {
		s.wt.bump(s.db, s.keyOf(e))
	}
	switch kinds[s.rules.get(e.rule).Kind].shape {
	case inLog:
		s.logs.release(uint32(e.a))
	case inLeases:
		s.leases.release(uint32(e.a))
	case inValue:
		if e.c != 0 {
			s.heapRemove(idx)
		}
		s.strs.release(uint32(e.b))
	case inColl:
		if e.c != 0 {
			s.heapRemove(idx)
		}
		s.colls.release(uint32(e.b))
	}
	s.rules.release(e.rule)
	if e.klen == arenaKey {
		s.arena.free(e.arenaRef())
	}
	s.freeEntry(idx)
	n := s.count.Add(-1)
	switch {
	case n == 0:
		s.reset()
		return
	case len(s.slots) > minSlots && n*10 < int64(len(s.slots)):
		want := minSlots
		for int64(want) < 2*n {
			want *= 2
		}
		s.resize(want)
	}
	if s.arena.garbage > s.arena.live && s.arena.garbage >= arenaPageSize {
		s.compactArena()
	}
	s.account()
}

// removeIdx removes the live entry idx, finding its slot by its key.
func (s *stripe) removeIdx(idx uint32) {
	key := s.keyOf(s.entry(idx))
	pos, found, ok := s.find(hiHash(xxhash.Sum64(key)), key)
	if ok && found == idx {
		s.remove(pos, idx)
	}
}

// hiHash is the part of a key's hash the stripe's index uses (the low bits
// chose the stripe).
func hiHash(h uint64) uint32 { return uint32(h >> 32) }

// setRule replaces the rule of entry e.
func (s *stripe) setRule(e *entry, r Rule) {
	if s.rules.get(e.rule) == r {
		return
	}
	id := s.rules.acquire(r)
	s.rules.release(e.rule)
	e.rule = id
	s.account()
}

// reset forgets every key of the stripe and releases its memory.
func (s *stripe) reset() {
	s.pages, s.meta, s.avail = nil, nil, nil
	s.slots, s.capBits, s.ib = nil, 0, 0
	s.arena.reset()
	s.rules = ruleTable{}
	s.logs = logSlab{}
	s.leases = leaseSlab{}
	s.strs = strSlab{}
	s.colls = collSlab{}
	s.count.Store(0)
	s.reclaimedAt = math.MinInt64
	s.account()
}

// compactArena copies the live arena keys into a fresh arena.
func (s *stripe) compactArena() {
	var na arena
	na.reset()
	end := s.slotsEnd()
	for idx := uint32(0); idx < end; idx++ {
		if s.pages[idx>>pageBits] == nil {
			idx |= pageSize - 1
			continue
		}
		if e := s.entry(idx); e.rule != 0 && e.klen == arenaKey {
			binary.LittleEndian.PutUint32(e.kbuf[:4], na.add(s.arena.key(e.arenaRef())))
		}
	}
	s.arena = na
}
