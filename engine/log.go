package engine

// RL.LOG keeps the timestamps of admitted units in a ring per key, oldest
// first, in a per-stripe side slab indexed by the entry's a word. An entry t is
// live while t > now - W. A ring grows by doubling up to the limit (or the
// count it holds, which may exceed a lowered limit), shrinks when mostly
// empty, and is freed with its key. Time before the newest timestamp counts as
// that timestamp (time going backwards counts as none passing), which also
// keeps the ring sorted.

type logRing struct {
	buf  []int64
	head int
	n    int
}

// logSlab holds a stripe's rings; free lists released ring ids; ts counts
// the timestamps the rings hold (for the accounting, memory.go).
type logSlab struct {
	rings []logRing
	free  []uint32
	ts    int64
}

func (l *logSlab) alloc() uint32 { return slot(&l.rings, &l.free) }

func (l *logSlab) release(id uint32) {
	l.ts -= int64(l.rings[id].n)
	l.rings[id] = logRing{}
	l.free = append(l.free, id)
}

// at returns the i-th oldest timestamp.
func (r *logRing) at(i int) int64 {
	j := r.head + i
	if j >= len(r.buf) {
		j -= len(r.buf)
	}
	return r.buf[j]
}

func (r *logRing) newest() int64 { return r.at(r.n - 1) }

// expired counts the timestamps <= cut (they form a prefix).
func (r *logRing) expired(cut int64) int {
	lo, hi := 0, r.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.at(m) <= cut {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// prune drops the timestamps <= cut.
func (r *logRing) prune(cut int64) {
	k := r.expired(cut)
	if k == 0 {
		return
	}
	r.n -= k
	r.head += k
	if r.head >= len(r.buf) {
		r.head -= len(r.buf)
	}
	if r.n == 0 {
		r.head = 0
	}
	if len(r.buf) > 16 && r.n < len(r.buf)/4 {
		r.resize(max(8, 2*r.n))
	}
}

// popNewest drops the k newest timestamps (k <= n).
func (r *logRing) popNewest(k int) {
	r.n -= k
	if r.n == 0 {
		r.head = 0
	}
	if len(r.buf) > 16 && r.n < len(r.buf)/4 {
		r.resize(max(8, 2*r.n))
	}
}

// resize moves the timestamps into a buffer of capacity c >= n.
func (r *logRing) resize(c int) {
	buf := make([]int64, c)
	for i := 0; i < r.n; i++ {
		buf[i] = r.at(i)
	}
	r.buf, r.head = buf, 0
}

// push appends k copies of t, growing the ring by doubling up to limit.
func (r *logRing) push(t int64, k int, limit int) {
	need := r.n + k
	if need > len(r.buf) {
		c := max(len(r.buf), 4)
		for c < need {
			c *= 2
		}
		r.resize(max(need, min(c, limit)))
	}
	j := r.head + r.n
	for range k {
		if j >= len(r.buf) {
			j -= len(r.buf)
		}
		r.buf[j] = t
		j++
	}
	r.n = need
}

// logResult fills the reply for a log holding logged live timestamps whose
// newest is newest, after a call at now.
func logResult(r Rule, logged int, newest, now int64) Result {
	res := Result{Kind: KindLog, Allowed: true, Limit: r.Limit, Remaining: max(0, r.Limit-int64(logged))}
	if logged > 0 {
		res.ResetAfter = ceilMs(newest + r.Period - now)
	}
	return res
}

// decideLog is decide for KindLog (see decide). found, pos and idx are the
// key's lookup.
func (s *stripe) decideLog(now int64, hi uint32, key []byte, rule Rule, n int64, pos, idx uint32, found bool) (Result, bool) {
	var ring *logRing
	var e *entry
	stored := false
	if found {
		e = s.entry(idx)
		old := s.rules.get(e.rule)
		ring = &s.logs.rings[e.a]
		if ring.n > 0 {
			now = max(now, ring.newest())
		}
		s.logPrune(ring, now-old.Period)
		stored = ring.n > 0
		if stored && n == 0 {
			return logPeek(ring, rule, now), true
		}
		if stored && rule != old {
			s.setRule(e, rule)
			s.logPrune(ring, now-rule.Period)
		}
	}
	if n < 0 { // a refund: the -n newest live entries go
		if stored && ring.n > 0 {
			s.logPopNewest(ring, int(min(-n, int64(ring.n))))
		}
		if !found || ring.n == 0 {
			if found {
				s.remove(pos, idx)
			}
			return logResult(rule, 0, 0, now), false
		}
		return logResult(rule, ring.n, ring.newest(), now), true
	}
	logged := 0
	if ring != nil {
		logged = ring.n
	}
	if n > 0 && int64(logged)+n <= rule.Limit {
		if !stored { // a new key, or a dead one back: a creation (memory.go)
			if err := s.room(key, KindLog); err != nil {
				if found { // pruned empty: gone, as the other paths leave it
					s.remove(pos, idx)
				}
				return Result{Err: err}, false
			}
		}
		if !found {
			e = s.entry(s.insertLog(pos, hi, key, rule))
		}
		s.setRule(e, rule)
		ring = &s.logs.rings[e.a]
		s.logPush(ring, now, int(n), int(rule.Limit))
		return logResult(rule, ring.n, now, now), true
	}
	if n == 0 {
		if found && !stored {
			s.remove(pos, idx)
		}
		return logResult(rule, 0, 0, now), false
	}
	res := logDenied(ring, rule, logged, 0, n, now)
	if logged == 0 && found {
		s.remove(pos, idx)
		return res, false
	}
	return res, logged > 0
}

// logDenied is the reply denying n (> 0, over the limit with the logged
// live entries, which start at index start of ring) for rule at now. ring
// may be nil when logged is 0.
func logDenied(ring *logRing, rule Rule, logged, start int, n, now int64) Result {
	res := logResult(rule, logged, 0, now)
	res.Allowed = false
	if n > rule.Limit {
		res.RetryAfter = -1
	} else {
		k := int(int64(logged) + n - rule.Limit)
		res.RetryAfter = ceilMs(ring.at(start+k-1) + rule.Period - now)
	}
	if logged > 0 {
		res.ResetAfter = ceilMs(ring.newest() + rule.Period - now)
	}
	return res
}

// logPeek is the reply of a cost-0 call with rule on a non-empty ring at
// now (already moved to the ring's newest time), which may hold more live
// entries than a lowered limit: then it denies until enough have expired.
func logPeek(ring *logRing, rule Rule, now int64) Result {
	return logPeekN(ring, ring.n-ring.expired(now-rule.Period), rule, now)
}

// logPeekN is logPeek given the count of live entries, the newest of ring.
func logPeekN(ring *logRing, logged int, rule Rule, now int64) Result {
	res := logResult(rule, logged, ring.newest(), now)
	if over := int64(logged) - rule.Limit; over > 0 {
		res.Allowed = false
		res.RetryAfter = ceilMs(ring.at(ring.n-logged+int(over)-1) + rule.Period - now)
	}
	return res
}

// logEval is what decideLog would reply for rule and n at now, changing
// nothing; old is the stored rule and ring the key's ring (nil when the
// key has no state).
func logEval(ring *logRing, old, rule Rule, n, now int64) Result {
	if ring != nil && ring.n > 0 {
		now = max(now, ring.newest())
		if ring.n-ring.expired(now-old.Period) == 0 {
			ring = nil
		}
	} else {
		ring = nil
	}
	if ring == nil {
		res := logResult(rule, 0, 0, now)
		if n > rule.Limit {
			res.Allowed, res.RetryAfter = false, -1
		} else if n > 0 {
			res = logResult(rule, int(n), now, now)
		}
		return res
	}
	cut := now - min(old.Period, rule.Period)
	logged := ring.n - ring.expired(cut)
	start := ring.n - logged
	switch {
	case n == 0:
		return logPeekN(ring, logged, rule, now)
	case n < 0:
		left := int(max(0, int64(logged)+n))
		if left == 0 {
			return logResult(rule, 0, 0, now)
		}
		return logResult(rule, left, ring.at(start+left-1), now)
	case int64(logged)+n <= rule.Limit:
		return logResult(rule, logged+int(n), now, now)
	}
	return logDenied(ring, rule, logged, start, n, now)
}

// insertLog inserts key as an RL.LOG key with an empty ring.
func (s *stripe) insertLog(pos, hi uint32, key []byte, rule Rule) uint32 {
	id := s.logs.alloc()
	return s.insert(pos, hi, key, rule, state{a: int64(id)})
}

// logTTL is the nanoseconds until the log at now is empty.
func (s *stripe) logTTL(e *entry, r Rule, now int64) int64 {
	ring := &s.logs.rings[e.a]
	if ring.n == 0 {
		return 0
	}
	return max(0, ring.newest()+r.Period-now)
}
