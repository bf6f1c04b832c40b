package engine

import "sync/atomic"

// SCAN, KEYS, FLUSHALL and Sweep walk the stripes' slabs in index order, one
// stripe lock at a time. Entry indices never change while a key lives, so a
// cursor (stripe<<32 | entry index) stays meaningful between calls and every
// key present for a whole SCAN is returned at least once.

const defaultScanCount = 10

// sweepCursor is Sweep's round-robin position, stripe<<32 | entry index.
type sweepCursor struct{ pos atomic.Uint64 }

// scanWorkFactor bounds the entry slots one SCAN step examines to this
// many per key of its COUNT (plus one page), so that a step over a slab
// full of holes left by deleted keys still ends quickly.
const scanWorkFactor = 16

// scan runs one SCAN step: it examines up to COUNT (op.Count) keys, live or
// not, from the cursor on, and returns those with state at now that match.
// COUNT is counted in keys, as Redis counts its COUNT, not in lock stripes
// or slots: an empty stripe is skipped without taking its lock, and a step
// that has used its COUNT looks ahead for the next key so that the cursor
// it returns is 0 when none is left. A keyspace of n keys that does not
// change is thus scanned in max(1, ceil(n/COUNT)) steps, unless holes left
// by deleted keys exhaust a step's work bound (scanWorkFactor) first.
func (e *Engine) scan(now int64, op *Op) Result {
	budget := int(op.Count)
	if op.Count <= 0 || op.Count > 1<<20 {
		budget = defaultScanCount
		if op.Count > 1<<20 {
			budget = 1 << 20
		}
	}
	work := budget*scanWorkFactor + pageSize
	si, idx := op.Cursor>>32, uint32(op.Cursor)
	var keys [][]byte
	for si < uint64(len(e.stripes)) && work > 0 {
		s := e.stripes[si]
		if s.count.Load() == 0 {
			// Nothing to return here; a key added to it now was not
			// present for the whole scan.
			si, idx = si+1, 0
			continue
		}
		e.lk(s)
		var done bool
		idx, done, budget, work = s.scanWalk(idx, budget, work, func(ent *entry) {
			if op.Rule.Kind != KindNone && s.rules.get(ent.rule).Kind != op.Rule.Kind {
				return
			}
			keys = s.appendIfMatch(keys, ent, now, op.Pattern)
		})
		e.unlk(s)
		if done {
			si, idx = si+1, 0
		} else if budget == 0 {
			break // stopped at the next key, still unvisited
		}
	}
	var cursor uint64
	if si < uint64(len(e.stripes)) {
		cursor = si<<32 | uint64(idx)
	}
	return Result{Keys: keys, Cursor: cursor}
}

// scanWalk calls fn on the entries in use from index idx on until it has
// called it keys times and then reached the next entry in use (which it does
// not visit), or has examined work slots (a released page counts as one),
// or reached the end of the stripe. It returns where it stopped, whether the
// stripe is done, and the keys and work left.
func (s *stripe) scanWalk(idx uint32, keys, work int, fn func(ent *entry)) (uint32, bool, int, int) {
	end := s.slotsEnd()
	for work > 0 {
		if idx >= end {
			return 0, true, keys, work
		}
		work--
		if next, unused := s.pageUnused(idx); unused {
			idx = next
			continue
		}
		if ent := s.entry(idx); ent.rule != 0 {
			if keys == 0 {
				return idx, false, 0, work
			}
			fn(ent)
			keys--
		}
		idx++
	}
	return idx, idx >= end, keys, work
}

// appendIfMatch appends a copy of ent's key if it has state at now and
// matches pattern (empty matches all).
func (s *stripe) appendIfMatch(keys [][]byte, ent *entry, now int64, pattern []byte) [][]byte {
	key := s.keyOf(ent)
	if len(pattern) > 0 && !globMatch(pattern, key) {
		return keys
	}
	if _, _, _, live := s.liveState(ent, now); !live {
		return keys
	}
	return append(keys, append([]byte(nil), key...))
}

// pageUnused reports whether slot idx is on a released page or past the
// slots its page has ever used, and returns the first slot of the next
// page: a walk goes there next.
func (s *stripe) pageUnused(idx uint32) (uint32, bool) {
	pg := idx >> pageBits
	if s.pages[pg] == nil || uint32(s.meta[pg].fresh) <= idx&(pageSize-1) {
		return (pg + 1) << pageBits, true
	}
	return idx, false
}

// walk calls fn on the live entries from index idx on, examining up to budget
// slots (a released page counts as one). It returns where it stopped, whether
// the stripe is done, and the budget left. fn may remove the entry it is given.
func (s *stripe) walk(idx uint32, budget int, fn func(idx uint32, ent *entry)) (uint32, bool, int) {
	for budget > 0 {
		if idx >= s.slotsEnd() {
			return 0, true, budget
		}
		budget--
		if next, unused := s.pageUnused(idx); unused {
			idx = next
			continue
		}
		if ent := s.entry(idx); ent.rule != 0 {
			fn(idx, ent)
		}
		idx++
	}
	return idx, idx >= s.slotsEnd(), budget
}

// walkAll calls fn on every key of s. The caller holds s.mu.
func (s *stripe) walkAll(fn func(idx uint32, ent *entry)) {
	s.walk(0, int(s.slotsEnd())+1, fn)
}

// eachStripe calls fn on every stripe in turn, holding that stripe's lock
// (one stripe lock at a time, never two).
func (e *Engine) eachStripe(fn func(s *stripe)) {
	for _, s := range e.stripes {
		e.lk(s)
		fn(s)
		e.unlk(s)
	}
}

// keys returns every key with state at now matching pattern.
func (e *Engine) keys(now int64, pattern []byte) [][]byte {
	var keys [][]byte
	e.eachStripe(func(s *stripe) {
		s.walkAll(func(_ uint32, ent *entry) {
			keys = s.appendIfMatch(keys, ent, now, pattern)
		})
	})
	return keys
}

// count returns how many keys have state at now (OpCount). It examines every
// key, one stripe lock at a time.
func (e *Engine) count(now int64) int64 {
	n := int64(0)
	e.eachStripe(func(s *stripe) { n += s.countLive(now) })
	return n
}

// countLive returns how many of s's keys have state at now. The caller
// holds s.mu.
func (s *stripe) countLive(now int64) int64 {
	n := int64(0)
	s.walkAll(func(_ uint32, ent *entry) {
		if _, _, _, live := s.liveState(ent, now); live {
			n++
		}
	})
	return n
}

// flush forgets every key and returns how many had state at now. The
// watched keys that had state get new versions, as Redis touches the
// watched keys a flush removed.
func (e *Engine) flush(now int64) int64 {
	var touched [][]byte
	if e.wt.active() {
		for _, k := range e.wt.keysOf(e.stripes[0].db) {
			if e.inspect(now, OpExists, k).Count == 1 {
				touched = append(touched, k)
			}
		}
	}
	defer func() {
		for _, k := range touched {
			e.wt.bump(e.stripes[0].db, k)
		}
	}()
	n := int64(0)
	e.eachStripe(func(s *stripe) {
		n += s.countLive(now)
		s.reset()
	})
	return n
}

// sweepBatch bounds the slots examined under one stripe lock.
const sweepBatch = 512

// Sweep examines up to maxKeys entry slots (at most one round of the whole
// engine), continuing round-robin across stripes from where the last call
// stopped, and removes the keys whose state is back at its initial state at
// now (with limits set, at now down to the whole second: memory.go). It holds one stripe lock at a time, for
// at most sweepBatch slots, and returns how many keys it removed.
func (e *Engine) Sweep(now int64, maxKeys int) int {
	if e.dbs == nil {
		return e.sweepDB(now, maxKeys)
	}
	n := 0
	e.eachDB(func(d *Engine) { n += d.sweepDB(now, maxKeys) })
	return n
}

// sweepDB is Sweep of one database.
func (e *Engine) sweepDB(now int64, maxKeys int) int {
	now = e.countedAt(now) // with limits, keep what still counts (memory.go)
	removed := e.drainExpired(now)
	pos := e.sweep.pos.Load()
	si, idx := pos>>32, uint32(pos)
	if si >= uint64(len(e.stripes)) {
		si, idx = 0, 0
	}
	start, visited := si, 0
	for budget := maxKeys; budget > 0; {
		if si >= uint64(len(e.stripes)) {
			si, idx = 0, 0
		}
		if si == start && visited > 0 && idx == 0 {
			break // one full round per call at most
		}
		visited++
		s := e.stripes[si]
		e.lk(s)
		var done bool
		var left int
		idx, done, left = s.walk(idx, min(budget, sweepBatch), func(i uint32, ent *entry) {
			if _, _, _, live := s.liveState(ent, now); !live {
				s.removeIdx(i)
				removed++
			}
		})
		e.unlk(s)
		budget -= min(budget, sweepBatch) - left
		if done {
			si, idx = si+1, 0
			budget--
		}
	}
	e.sweep.pos.Store(si<<32 | uint64(idx))
	return removed
}
