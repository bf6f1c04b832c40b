package engine

// RL.TOKEN and RL.LEAKY are one meter. With I the emission interval, the
// state words are a = L, b = d, c = last: the level is L - d/I with integer
// L >= 0 and 0 <= d < I, and L == 0 implies d == 0. The initial state (a full
// token bucket, an empty leaky bucket) is L == 0. A token bucket's tokens are
// capacity - level. Every quantity is a whole number of nanoseconds, so the
// meter is exact.
//
// A request of n is allowed iff L + n <= C: level + n <= C with 0 <= d/I < 1
// reduces to that, L, n and C being integers.

// bucketDrain lets the level drain up to now (time going backwards counts as
// none passing) and returns the effective time max(now, last).
func bucketDrain(st *state, interval, now int64) int64 {
	if now <= st.c {
		return st.c
	}
	e := elapsed(now, st.c)
	st.c = now
	if st.a == 0 {
		return now
	}
	q := e / interval
	d := st.b + (e - q*interval)
	if d >= interval {
		d -= interval
		q++
	}
	if q >= st.a {
		st.a, st.b = 0, 0
	} else {
		st.a -= q
		st.b = d
	}
	return now
}

// bucketChange applies a new rule to a drained, non-initial state: the
// fractional level is kept in whole nanoseconds of the new interval (rounded
// toward fewer tokens, a fuller meter), then tokens = min(tokens, capacity)
// (RL.TOKEN) or level = min(level, capacity) (RL.LEAKY).
func bucketChange(k Kind, st *state, old, r Rule) {
	if r.Period != old.Period && st.b != 0 {
		st.b = int64(mulDiv(uint64(st.b), uint64(r.Period), uint64(old.Period)))
	}
	if r.Limit == old.Limit {
		return
	}
	if k == KindToken {
		if l := st.a + r.Limit - old.Limit; l > 0 {
			st.a = l
		} else {
			st.a, st.b = 0, 0
		}
		return
	}
	if st.a > r.Limit {
		st.a, st.b = r.Limit, 0
	}
}

// bucketEval decides a cost of n on a drained state and fills the reply. A
// negative n is a refund, always allowed; n = 0 is judged like any cost (the
// level never exceeds the capacity, so it allows).
func bucketEval(st *state, r Rule, n int64) Result {
	c, i := r.Limit, r.Period
	res := Result{Kind: r.Kind, Limit: c}
	if n < 0 { // a refund: level = max(0, level - |n|)
		res.Allowed = true
		if st.a+n <= 0 {
			st.a, st.b = 0, 0
		} else {
			st.a += n
		}
	} else if st.a+n <= c {
		res.Allowed = true
		st.a += n
	} else if n > c {
		res.RetryAfter = -1
	} else {
		res.RetryAfter = ceilMsMulSub(uint64(st.a+n-c), uint64(i), uint64(st.b))
	}
	res.Remaining = max(0, c-st.a)
	if st.a > 0 {
		res.ResetAfter = ceilMsMulSub(uint64(st.a), uint64(i), uint64(st.b))
	}
	return res
}

// bucketTTL is the nanoseconds until a drained state is empty again.
func bucketTTL(st *state, r Rule) int64 {
	if st.a == 0 {
		return 0
	}
	return mulSubSat(uint64(st.a), uint64(r.Period), uint64(st.b))
}
