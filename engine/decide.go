package engine

// The decision flow shared by every kind. A key's stored state is first
// brought forward to now under its stored rule (normalize); that is
// invisible, so even reads may write it back. A state back at its initial
// state is the same as an absent key: it is removed, and a call on it starts
// from the initial state of the call's rule at the call's time. Otherwise a
// changed rule applies from now on (change) before deciding (eval). A peek
// (cost 0) changes nothing else; any other call stores its rule and the
// resulting state, even when denied. A refund (negative cost) commits like a
// charge; on an absent key it leaves the initial state, so nothing is stored.

// The steps of that flow, for the kinds whose state is three words (shape
// inWords in the table of kinds, kinds.go), are switches on the kind rather
// than function fields of its row: a state passed by pointer to a call
// through a function value escapes to the heap, and these run on every
// decision. Each switch names every inWords kind, and its default is
// unreachable (checkRule refuses a kind without a row, the other shapes
// take their own paths): TestDecisionSwitches fails for an inWords kind a
// switch lacks.

// normalize brings st forward to now under rule r and returns the effective
// time (now, or the later time the state already saw).
func normalize(st *state, r Rule, now int64) int64 {
	switch r.Kind {
	case KindToken, KindLeaky:
		return bucketDrain(st, r.Period, now)
	case KindFixed:
		return fixedNormalize(st, r.Period, now)
	case KindSliding:
		return slidingNormalize(st, r.Period, now)
	case KindGCRA:
		return now
	}
	panic(noDecisions(r.Kind))
}

// initial reports whether a normalized state is the initial state.
func initial(st *state, k Kind, now int64) bool {
	switch k {
	case KindToken, KindLeaky:
		return st.a == 0
	case KindFixed:
		return st.b == 0
	case KindSliding:
		return st.b == 0 && st.c == 0
	case KindGCRA:
		return st.a <= now
	}
	panic(noDecisions(k))
}

// fresh is the initial state of rule r at now.
func fresh(r Rule, now int64) state {
	switch r.Kind {
	case KindToken, KindLeaky:
		return state{c: now}
	case KindFixed, KindSliding:
		return state{a: align(now, r.Period)}
	case KindGCRA:
		return state{a: now} // tat = now
	}
	panic(noDecisions(r.Kind))
}

// change applies rule r in place of old to a normalized, non-initial state.
func change(st *state, old, r Rule, now int64) {
	switch r.Kind {
	case KindToken, KindLeaky:
		bucketChange(r.Kind, st, old, r)
	case KindFixed:
		fixedChange(st, old, r, now)
	case KindSliding:
		slidingChange(st, old, r, now)
	case KindGCRA: // the new rule applies to the stored tat as it is
	default:
		panic(noDecisions(r.Kind))
	}
}

// eval decides a cost of n under rule r on a normalized state.
func eval(st *state, r Rule, n, now int64) Result {
	switch r.Kind {
	case KindToken, KindLeaky:
		return bucketEval(st, r, n)
	case KindFixed:
		return fixedEval(st, r, n, now)
	case KindSliding:
		return slidingEval(st, r, n, now)
	case KindGCRA:
		return gcraEval(st, r, n, now)
	}
	panic(noDecisions(r.Kind))
}

// ttl is the nanoseconds until a normalized state is initial.
func ttl(st *state, r Rule, now int64) int64 {
	switch r.Kind {
	case KindToken, KindLeaky:
		return bucketTTL(st, r)
	case KindFixed:
		return fixedTTL(st, r, now)
	case KindSliding:
		return slidingTTL(st, r, now)
	case KindGCRA:
		return gcraTTL(st, now)
	}
	panic(noDecisions(r.Kind))
}

// noDecisions is the unreachable default of the switches above.
type noDecisions Kind

func (k noDecisions) Error() string {
	return "engine: no decisions for kind " + Kind(k).String() + " (decide.go)"
}

// decide runs one decision on the stripe (locked), writes its result to
// *res and reports whether the key has state afterwards. hi is the key's
// hiHash; the rule and cost are valid. The result goes through a pointer
// rather than by value: a Result is 184 bytes, and its copies on the way
// up to Decide's caller were 8% of a decision's instructions
// (BenchmarkEngineToken under valgrind, 2026-11-29).
func (s *stripe) decide(now int64, hi uint32, key []byte, rule Rule, n int64, res *Result) bool {
	pos, idx, found := s.find(hi, key)
	var e *entry
	if found {
		e = s.entry(idx)
		if s.rules.get(e.rule).Kind != rule.Kind {
			if _, _, _, live := s.liveState(e, now); live {
				*res = Result{Err: ErrWrongType}
				return true
			}
			// Back at its initial state, the key is absent: any kind may
			// take it.
			s.remove(pos, idx)
			pos, _, found = s.find(hi, key)
			e = nil
		}
	}
	switch kinds[rule.Kind].shape {
	case inLog:
		r, live := s.decideLog(now, hi, key, rule, n, pos, idx, found)
		*res = r
		return live
	case inLeases: // only peeks come here (RL.PEEK)
		r, live := s.acquire(now, hi, key, rule, 0, nil)
		*res = r
		return live
	}
	stored := false
	var st state
	t := now
	if found {
		old := s.rules.get(e.rule)
		st = state{e.a, e.b, e.c}
		t = normalize(&st, old, now)
		stored = !initial(&st, rule.Kind, t)
		if stored && old != rule {
			if n == 0 {
				e.a, e.b, e.c = st.a, st.b, st.c
				cp := st
				change(&cp, old, rule, t)
				*res = eval(&cp, rule, 0, t)
				return true
			}
			change(&st, old, rule, t)
		}
	}
	if !stored {
		t = now
		st = fresh(rule, now)
	}
	*res = eval(&st, rule, n, t)
	live := !initial(&st, rule.Kind, t)
	switch {
	case n == 0 && stored:
		e.a, e.b, e.c = st.a, st.b, st.c
	case n == 0:
		if found {
			s.remove(pos, idx)
		}
	case found && live:
		if !stored { // a dead key comes back: a creation (memory.go)
			if err := s.room(key, rule.Kind); err != nil {
				*res = Result{Err: err}
				return false
			}
		}
		e.a, e.b, e.c = st.a, st.b, st.c
		s.setRule(e, rule)
	case found:
		s.remove(pos, idx)
	case live:
		if err := s.room(key, rule.Kind); err != nil {
			*res = Result{Err: err}
			return false
		}
		s.insert(pos, hi, key, rule, st)
	}
	return live
}

// liveState loads entry e's state normalized at now and reports whether it
// is not initial (the key exists at now), with the effective time. For
// RL.LOG the ring is consulted and st is left zero.
func (s *stripe) liveState(e *entry, now int64) (st state, r Rule, t int64, live bool) {
	r = s.rules.get(e.rule)
	switch kinds[r.Kind].shape {
	case inLog:
		ring := &s.logs.rings[e.a]
		return st, r, now, ring.n > 0 && ring.newest() > now-r.Period
	case inLeases:
		return st, r, now, s.leaseLive(e, now)
	case inValue:
		return st, r, now, strLive(e, now)
	}
	st = state{e.a, e.b, e.c}
	t = normalize(&st, r, now)
	return st, r, t, !initial(&st, r.Kind, t)
}
