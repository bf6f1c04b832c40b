package engine

import (
	"bytes"
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// RL.ALL (OpAll): several limits decided at one instant, all charged or
// none. The op takes the locks of every stripe its keys fall in, in
// ascending stripe index, each once (the lock order of engine.go), and holds
// them all while it first evaluates every limit without changing anything,
// then, only when every limit allows, charges each one through the same
// decide path a single command takes. Nothing can run between the two
// phases on those keys, so the charges are exactly the evaluated outcomes.
// A denied call stores nothing at all, not even new parameters.
//
// A charge could still fail only for lack of room for a new key (the
// key and memory limits): before charging, the room every new key and
// every added timestamp needs is checked against the totals at once, with
// the same reclaim-and-ask-again protocol a single decision uses
// (memory.go), and the charges that follow are not asked again (stripe.
// approved), so a call is refused whole or charged whole even while other
// callers create keys in other stripes.

// allKeys is an OpAll's keys' hashes and the sorted distinct stripes they
// fall in.
type allKeys struct {
	h       [MaxAll]uint64
	stripes [MaxAll]uint32
	ns      int
	touched bool // allRun has looked the keys up already
}

// addStripe inserts stripe si into the sorted set of stripes to lock (at
// most MaxAll), once.
func (k *allKeys) addStripe(si uint32) {
	j := k.ns
	for j > 0 && k.stripes[j-1] > si {
		j--
	}
	if j > 0 && k.stripes[j-1] == si {
		return
	}
	copy(k.stripes[j+1:k.ns+1], k.stripes[j:k.ns])
	k.stripes[j] = si
	k.ns++
}

// all runs an OpAll at now; room, when large enough, holds the per-limit
// results.
func (e *Engine) all(now int64, lims []Limit, room []Result) Result {
	var res Result
	e.allHashed(now, lims, nil, room, false, &res)
	return res
}

// allHashed is all, its result written to *res, with the keys' hashes, when
// hashes is not nil, already computed (allRun computes them for its
// look-ahead); touched says that allRun has also looked every key up, so
// that allLocked need not again. The results go through pointers rather
// than by value all the way down: a Result is 128 bytes, and its copies
// were a seventh of an RL.ALL's time in the engine.
func (e *Engine) allHashed(now int64, lims []Limit, hashes []uint64, room []Result, touched bool, res *Result) {
	if len(lims) == 0 || len(lims) > MaxAll {
		*res = Result{Err: badRule("%d limits in RL.ALL: must be 1 to %d", len(lims), MaxAll)}
		return
	}
	var k allKeys
	k.touched = touched
	for i := range lims {
		l := &lims[i]
		if !l.Rule.Kind.Layerable() {
			*res = Result{Err: badRule("RL.ALL takes no %s limit", l.Rule.Kind)}
			return
		}
		if err := e.checkRule(l.Rule, l.Cost); err != nil {
			*res = Result{Err: err}
			return
		}
		var h uint64
		if hashes != nil {
			h = hashes[i]
		} else {
			h = xxhash.Sum64(l.Key)
		}
		for j := 0; j < i; j++ {
			if k.h[j] == h && bytes.Equal(lims[j].Key, l.Key) {
				*res = Result{Err: &errcode.Error{Code: errcode.DuplicateKey, Detail: string(l.Key)}}
				return
			}
		}
		k.h[i] = h
		k.addStripe(uint32(h & e.mask))
	}
	e.lockAll(&k)
	e.allLocked(now, lims, &k, room, res)
	if res.Err == errNoRoom {
		e.unlockAll(&k)
		e.reclaimAll(now)
		e.lockAll(&k)
		e.setFinal(&k, true)
		e.allLocked(now, lims, &k, room, res)
		e.setFinal(&k, false)
	}
	e.unlockAll(&k)
}

// allRunKeys bounds the keys allRun looks up ahead.
const allRunKeys = 4 * lookAhead

// allRun runs a run of at most lookAhead OpAll ops at now, looking their
// keys up first (up to allRunKeys of them) as decideRun does for single
// decisions, so that a pipeline of RL.ALL calls has the cache misses of
// many keys in flight at once. The look-up changes nothing.
func (e *Engine) allRun(now int64, ops []Op, results []Result) {
	var hashes [allRunKeys]uint64
	var ends [lookAhead]int // ops[i]'s hashes end at hashes[ends[i]]
	n, hashed := 0, 0       // hashed: the ops whose keys are in hashes
	var sink uint32
	for i := range ops {
		all := ops[i].All
		if n+len(all) > len(hashes) || len(all) > MaxAll {
			break // this op and those after it hash their keys in all
		}
		hashed++
		for j := range all {
			h := xxhash.Sum64(all[j].Key)
			hashes[n] = h
			n++
			s := e.stripes[h&e.mask]
			s.mu.Lock()
			sink += s.touchSlot(hiHash(h))
			s.mu.Unlock()
		}
		ends[i] = n
	}
	for _, h := range hashes[:n] {
		s := e.stripes[h&e.mask]
		s.mu.Lock()
		sink += s.touchEntry(hiHash(h))
		s.mu.Unlock()
	}
	results[0].Count = int64(sink) // overwritten below; keeps the loads
	start := 0
	for i := range ops {
		if i >= hashed {
			results[i] = e.all(now, ops[i].All, ops[i].Each)
			continue
		}
		e.allHashed(now, ops[i].All, hashes[start:ends[i]], ops[i].Each, true, &results[i])
		start = ends[i]
	}
}

func (e *Engine) lockAll(k *allKeys) {
	for _, si := range k.stripes[:k.ns] {
		e.stripes[si].mu.Lock()
	}
}

func (e *Engine) unlockAll(k *allKeys) {
	for i := k.ns - 1; i >= 0; i-- {
		e.stripes[k.stripes[i]].mu.Unlock()
	}
}

func (e *Engine) setApproved(k *allKeys, v bool) {
	for _, si := range k.stripes[:k.ns] {
		e.stripes[si].approved = v
	}
}

func (e *Engine) setFinal(k *allKeys, v bool) {
	for _, si := range k.stripes[:k.ns] {
		e.stripes[si].final = v
	}
}

// allLocked is OpAll with its stripes locked; it writes the result to *res.
func (e *Engine) allLocked(now int64, lims []Limit, k *allKeys, room []Result, res *Result) {
	// Look every key up before deciding any, as decideRun does: the index
	// slots, then the entries, so that the cache misses of the limits are
	// in flight together rather than one after the other.
	var sink uint32
	if !k.touched {
		for i := range lims {
			sink += e.stripes[k.h[i]&e.mask].touchSlot(hiHash(k.h[i]))
		}
		for i := range lims {
			sink += e.stripes[k.h[i]&e.mask].touchEntry(hiHash(k.h[i]))
		}
	}
	var each []Result
	if cap(room) >= len(lims) {
		each = room[:len(lims):len(lims)] // evalOnly writes every entry whole
	} else {
		each = make([]Result, len(lims))
	}
	each[0].Count = int64(sink) // overwritten below; keeps the loads
	allowed := true
	// Zeroing room for MaxAll limits would cost more than deciding three.
	var commits []commit
	if len(lims) <= 4 {
		commits = new([4]commit)[:len(lims)]
	} else {
		commits = new([MaxAll]commit)[:len(lims)]
	}
	for i := range lims {
		l := &lims[i]
		s := e.stripes[k.h[i]&e.mask]
		if err := s.evalOnly(now, hiHash(k.h[i]), l.Key, l.Rule, l.Cost, &commits[i], &each[i]); err != nil {
			*res = Result{Err: err}
			return
		}
		allowed = allowed && each[i].Allowed
	}
	if allowed {
		if err := e.allRoom(now, lims, k, commits); err != nil {
			*res = Result{Err: err}
			return
		}
		if i, r := e.charge(now, lims, k.h[:len(lims)], k, commits, each); i >= 0 {
			*res = Result{Err: fmt.Errorf("RL.ALL charge of %q: %w", lims[i].Key, r.Err)}
			return
		}
	} else {
		// Those that would have allowed reply their state as it stands.
		for i := range lims {
			if !each[i].Allowed {
				continue
			}
			l := &lims[i]
			s := e.stripes[k.h[i]&e.mask]
			_ = s.evalOnly(now, hiHash(k.h[i]), l.Key, l.Rule, 0, nil, &each[i])
			each[i].Allowed, each[i].RetryAfter = true, 0
		}
	}
	combine(each, allowed, res)
}

// charge charges limits that evalOnly evaluated under the locks of keys
// (held), every one allowed and the room for them granted (allRoom): h[i]
// is lims[i].Key's hash, commits[i] how to store its outcome. A live key
// staying live gets the evaluated state written; creations, removals, dead
// keys and RL.LOG go through decide, whose outcome is the one evaluated
// (nothing ran in between), stored in each[i] unless each is nil. It
// returns the index of a charge decide refused (it cannot happen: each was
// evaluated allowed, its room checked) with decide's result, else -1.
// RL.ALL and the rate limit service both commit through it.
func (e *Engine) charge(now int64, lims []Limit, h []uint64, keys *allKeys, commits []commit, each []Result) (int, Result) {
	// The room was granted for the whole call: creations in other
	// stripes by concurrent callers must not refuse a charge half way.
	e.setApproved(keys, true)
	defer e.setApproved(keys, false)
	for i := range lims {
		l := &lims[i]
		s := e.stripes[h[i]&e.mask]
		switch c := &commits[i]; {
		case c.skip: // a peek with nothing to drop: the evaluated result stands
			continue
		case c.e != nil: // a live key staying live: decide would write just this
			c.e.a, c.e.b, c.e.c = c.st.a, c.st.b, c.st.c
			if !c.peek {
				s.setRule(c.e, l.Rule)
			}
			continue
		}
		var r Result
		s.decide(now, hiHash(h[i]), l.Key, l.Rule, l.Cost, &r)
		if r.Err == nil && !r.Allowed {
			r.Err = &errcode.Error{Code: errcode.Internal, Detail: "denied after it was evaluated allowed"}
		}
		if r.Err != nil {
			return i, r
		}
		if each != nil {
			each[i] = r
		}
	}
	return -1, Result{}
}

// combine builds RL.ALL's combined reply from the per-limit ones: limit and
// remaining of the one with the fewest remaining (the first on ties), the
// largest retry among the denying ones (-1 if any is -1), the largest reset.
func combine(each []Result, allowed bool, res *Result) {
	best := 0
	*res = Result{Allowed: allowed, Each: each}
	for i := range each {
		if each[i].Remaining < each[best].Remaining {
			best = i
		}
		res.ResetAfter = max(res.ResetAfter, each[i].ResetAfter)
		if !allowed && !each[i].Allowed && res.RetryAfter != -1 {
			if each[i].RetryAfter == -1 {
				res.RetryAfter = -1
			} else {
				res.RetryAfter = max(res.RetryAfter, each[i].RetryAfter)
			}
		}
	}
	res.Kind, res.Limit, res.Remaining = each[best].Kind, each[best].Limit, each[best].Remaining
}

// allRoom checks, before anything is charged, that the keys the call
// creates and the timestamps it logs fit the key and memory limits
// together: errNoRoom when the held totals leave no room (reclaim and ask
// again), or the limit's error on the final asking.
//
// commits[i].live, found by evalOnly under the same locks, says whether
// limit i's key has state at now.
func (e *Engine) allRoom(now int64, lims []Limit, k *allKeys, commits []commit) error {
	if e.tot == nil {
		return nil
	}
	var keys, bytes int64
	for i := range lims {
		l := &lims[i]
		if l.Cost <= 0 {
			continue
		}
		s := e.stripes[k.h[i]&e.mask]
		if kinds[l.Rule.Kind].shape == inLog {
			bytes += l.Cost * tsCost
		}
		if commits[i].live {
			continue
		}
		if err := s.roomExtra(l.Key, l.Rule.Kind, keys, bytes); err != nil {
			return err
		}
		keys++
		bytes += newKeyCost(l.Key, l.Rule.Kind) + ruleCost
	}
	return nil
}

// commit says how to charge a limit that evalOnly evaluated, with nothing
// run in between: skip (a peek on an absent key), write st (and, unless a
// peek, the rule) into the live entry e, or, when neither is set, run decide (creations, removals, dead keys and RL.LOG, whose ring
// evalOnly does not build). Entries do not move while their key lives, so
// e stays valid while the other limits of the call are charged.
type commit struct {
	e    *entry
	st   state
	skip bool
	peek bool // write st (the stored state brought forward) but not the rule
	live bool // the key has state at now, of whatever kind
}

// evalOnly writes to *res what decide would reply for rule and n at now,
// changing nothing (under mu); it returns ErrWrongType, and leaves *res
// alone, when the key holds a live limiter of another kind. rule is one of
// the five RL.* kinds. When c is not nil it receives how the outcome is to
// be stored.
func (s *stripe) evalOnly(now int64, hi uint32, key []byte, rule Rule, n int64, c *commit, res *Result) error {
	_, idx, found := s.find(hi, key)
	hadEntry := found
	var e *entry
	var old Rule
	if found {
		e = s.entry(idx)
		old = s.rules.get(e.rule)
		if old.Kind != rule.Kind {
			if _, _, _, live := s.liveState(e, now); live {
				return ErrWrongType
			}
			found = false
		} else if c != nil {
			_, _, _, c.live = s.liveState(e, now)
		}
	}
	if kinds[rule.Kind].shape == inLog {
		var ring *logRing
		if found {
			ring = &s.logs.rings[e.a]
		}
		*res = logEval(ring, old, rule, n, now)
		return nil
	}
	stored := false
	var st state
	t := now
	if found {
		st = state{e.a, e.b, e.c}
		t = normalize(&st, old, now)
		stored = !initial(&st, rule.Kind, t)
		if stored && n == 0 && c != nil {
			c.e, c.st, c.peek = e, st, true // as decide writes a peek back
		}
		if stored && old != rule {
			change(&st, old, rule, t)
		}
	}
	if !stored {
		t = now
		st = fresh(rule, now)
	}
	*res = eval(&st, rule, n, t)
	if c != nil {
		switch {
		case n == 0 && !hadEntry:
			c.skip = true
		case n != 0 && stored && !initial(&st, rule.Kind, t):
			c.e, c.st = e, st
		}
	}
	return nil
}
