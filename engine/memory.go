package engine

import (
	"fmt"
	"sync/atomic"
)

// Memory accounting and the key and memory limits (Config.MaxKeys,
// Config.MaxBytes).
//
// Each stripe accounts its own state in bytes, from its structures rather
// than from the Go heap: entryCost per key (the 48-byte entry and its share
// of the hash index), the long keys' bytes in the arena, ringCost per RL.LOG
// key plus tsCost per timestamp it holds, leaseSetCost per concurrency key
// plus leaseCost and the token's bytes per lease it holds, and ruleCost per
// distinct rule.
// The figure is a function of the keys held and their states, not of the
// allocation history, so replicas holding the same keys account the same
// bytes, whatever snapshot they were restored from.
//
// A limit refuses only the creation of a key (ErrKeyLimit, ErrOOM): existing
// keys keep deciding, and a log may grow within its limit. Live limiter state
// is never evicted; only state back at its initial state, which is the same
// as no state, is reclaimed.
//
// Determinism. In a cluster every replica must refuse the same creations,
// yet each node reclaims dead state (back at its initial state) on its own
// schedule (Sweep), and a node restored from a snapshot lacks the dead keys
// its leader may still hold; so the decision cannot rest on the keys a
// replica happens to hold. It rests on the counted state instead: with
// limits set, a key counts until the whole second (reclaimQuantum) of the
// engine's clock after its state went back to its initial state, and a log
// timestamp likewise until the second after it expired. Every replica holds
// every counted key (Sweep and ExportStripe, with limits, drop only keys
// that stopped counting), and ops change counted keys alike everywhere (an
// op on a key drops its expired timestamps, or the key itself once back at
// its initial state, at once, on every replica), so the counted figures are
// the same on every replica at every log position.
//
// A key may be created at time now unless the counted keys (or bytes) plus
// the new one pass a limit. The held totals are upper bounds of the counted
// ones, so when they leave room the answer is "yes" everywhere. Otherwise
// the engine makes its accounting exact (reclaim: every key that stopped
// counting removed, every expired timestamp dropped) and decides on the
// exact figures. A stripe reclaimed in the current second stays exact for
// the rest of it (nothing stops counting within a second), so a full engine
// refusing creations walks each stripe at most once a second, and otherwise
// costs one lock per stripe per refusal.
const (
	// reclaimQuantum is the granularity, in engine time, at which keys and
	// timestamps stop counting for the limits (see above).
	reclaimQuantum = int64(1e9)
	// entryCost is one key's entry (48 bytes) plus its share of the hash
	// index (4-byte slots between 10% and 80% full).
	entryCost = 56
	// ruleCost is one distinct rule of a stripe: its slot and its map entry.
	ruleCost = 80
	// ringCost is an RL.LOG key's ring header; tsCost one timestamp.
	ringCost = 40
	tsCost   = 8
	// leaseSetCost is a concurrency key's lease set header and map;
	// leaseCost one lease (its treap node, its map entry and the token's
	// string header), its token's bytes aside.
	leaseSetCost = 96
	leaseCost    = 112
)

// totals are the engine-wide sums of the stripes' accounting, kept only when
// a limit is set (so that an engine without limits pays nothing for them).
type totals struct {
	maxKeys  int64
	maxBytes int64
	keys     atomic.Int64
	bytes    atomic.Int64
	errKeys  error // ErrKeyLimit, naming the limit
}

// errNoRoom is internal: the held totals leave no room for a new key, and
// only an exact count can tell (see Engine.Decide).
var errNoRoom = fmt.Errorf("engine: no room without reclaiming")

// bytes is the stripe's accounted memory (under mu).
func (s *stripe) bytes() int64 {
	rings := int64(len(s.logs.rings) - len(s.logs.free))
	sets := int64(len(s.leases.sets) - len(s.leases.free))
	return s.count.Load()*entryCost + int64(s.arena.live) + rings*ringCost + s.logs.ts*tsCost + int64(len(s.rules.ids))*ruleCost +
		sets*leaseSetCost + s.leases.count*leaseCost + s.leases.tokenBytes +
		s.strs.live()*strCost + s.strs.bytes +
		s.colls.live()*collCost + s.colls.bytes
}

// account brings the engine's totals up to date after a change of the
// stripe (under mu). Without limits there are no totals and it does nothing.
func (s *stripe) account() {
	t := s.tot
	if t == nil {
		return
	}
	n, m := s.count.Load(), s.bytes()
	if d := m - s.accBytes; d != 0 {
		t.bytes.Add(d)
	}
	if d := n - s.accKeys; d != 0 {
		t.keys.Add(d)
	}
	s.accKeys, s.accBytes = n, m
}

// newKeyCost is what creating key adds to the accounting (its rule aside).
func newKeyCost(key []byte, kind Kind) int64 {
	c := int64(entryCost)
	if len(key) > inlineKey {
		c += int64(len(key) + uvarintLen(uint64(len(key))))
	}
	return c + kindOf(kind).keyBytes
}

// room reports whether key may be created (under mu): nil, errNoRoom when
// the held totals leave no room and the stripe's caller should reclaim and
// ask again, or, on that second asking (s.final), the limit's error.
func (s *stripe) room(key []byte, kind Kind) error {
	return s.roomExtra(key, kind, 0, 0)
}

// roomExtra is room with keys more keys and bytes more bytes about to be
// added besides key (RL.ALL's earlier limits).
func (s *stripe) roomExtra(key []byte, kind Kind, keys, bytes int64) error {
	t := s.tot
	if t == nil || s.approved {
		return nil
	}
	if t.maxKeys > 0 && t.keys.Load()+keys >= t.maxKeys {
		if s.final {
			return t.errKeys
		}
		return errNoRoom
	}
	if t.maxBytes > 0 && t.bytes.Load()+bytes+newKeyCost(key, kind) > t.maxBytes {
		if s.final {
			return ErrOOM
		}
		return errNoRoom
	}
	return nil
}

// logPrune drops a ring's timestamps <= cut, keeping the accounting.
func (s *stripe) logPrune(ring *logRing, cut int64) {
	before := ring.n
	ring.prune(cut)
	if d := before - ring.n; d != 0 {
		s.logs.ts -= int64(d)
		s.account()
	}
}

// logPush appends k timestamps t to a ring, keeping the accounting.
func (s *stripe) logPush(ring *logRing, t int64, k, limit int) {
	ring.push(t, k, limit)
	s.logs.ts += int64(k)
	s.account()
}

// logPopNewest drops a ring's k newest timestamps, keeping the accounting.
func (s *stripe) logPopNewest(ring *logRing, k int) {
	ring.popNewest(k)
	s.logs.ts -= int64(k)
	s.account()
}

// countedAt is the time at which the limits judge what still counts: now,
// down to the whole reclaimQuantum (now itself without limits).
func (e *Engine) countedAt(now int64) int64 {
	if e.tot == nil {
		return now
	}
	return align(now, reclaimQuantum)
}

// reclaim makes the stripe's accounting exact, what it holds being what
// counts at now (under mu): it removes the keys that stopped counting and
// drops the log timestamps that did. A stripe reclaimed within the same
// quantum already is.
func (s *stripe) reclaim(now int64) {
	q := align(now, reclaimQuantum)
	if s.reclaimedAt == q {
		return
	}
	s.walkAll(func(i uint32, ent *entry) {
		_, r, _, live := s.liveState(ent, q)
		switch {
		case !live:
			s.removeIdx(i)
		case kinds[r.Kind].shape == inLog:
			s.logPrune(&s.logs.rings[ent.a], q-r.Period)
		case kinds[r.Kind].shape == inLeases:
			s.leasePrune(&s.leases.sets[ent.a], q)
		}
	})
	s.reclaimedAt = q
	s.account()
}

// decideFull is Decide once the held totals left no room for a new key:
// it makes every stripe's accounting exact at now, one stripe lock at a time,
// then decides again on the exact figures.
func (e *Engine) decideFull(now int64, h uint64, key []byte, rule Rule, cost int64, res *Result) {
	e.reclaimAll(now)
	s := e.stripes[h&e.mask]
	e.lk(s)
	s.final = true
	s.decide(now, hiHash(h), key, rule, cost, res)
	s.final = false
	e.unlk(s)
}

// reclaimAll makes every stripe's accounting exact at now, one stripe lock at
// a time.
func (e *Engine) reclaimAll(now int64) {
	e.top.eachStripeAll(func(s *stripe) { s.reclaim(now) })
}

// MemoryBytes is the engine's accounted memory in bytes (see memory.go):
// the figure Config.MaxBytes limits. Keys back at their initial state count
// until they are reclaimed. It takes each stripe's lock in turn.
func (e *Engine) MemoryBytes() int64 {
	n := int64(0)
	e.top.eachStripeAll(func(s *stripe) { n += s.bytes() })
	return n
}

// Limits returns the configured key and memory limits (0: none).
func (e *Engine) Limits() (maxKeys, maxBytes int64) {
	if e.tot == nil {
		return 0, 0
	}
	return e.tot.maxKeys, e.tot.maxBytes
}
