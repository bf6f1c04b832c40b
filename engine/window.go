package engine

// RL.FIXED and RL.SLIDING count in windows of length W aligned to the Unix
// epoch. RL.FIXED's state words are a = window start, b = count; RL.SLIDING's
// are a = window start, b = current count, c = previous window's count. A
// time before the stored window start counts as that start (time going
// backwards counts as none passing).

// fixedNormalize moves the state to the window holding now and returns the
// effective time.
func fixedNormalize(st *state, w, now int64) int64 {
	now = max(now, st.a)
	if cws := align(now, w); cws != st.a {
		st.a, st.b = cws, 0
	}
	return now
}

// fixedChange carries the count into the window of the new length that holds
// now (the state is normalized, so the old window holds now).
func fixedChange(st *state, old, r Rule, now int64) {
	if r.Period != old.Period {
		st.a = align(now, r.Period)
	}
}

func fixedEval(st *state, r Rule, n, now int64) Result {
	c, w := r.Limit, r.Period
	res := Result{Kind: KindFixed, Limit: c}
	if n < 0 { // a refund: count = max(0, count - |n|)
		res.Allowed = true
		st.b = max(0, st.b+n)
	} else if st.b+n <= c { // n = 0 denies when a lowered limit is exceeded
		res.Allowed = true
		st.b += n
	} else if n > c {
		res.RetryAfter = -1
	} else {
		res.RetryAfter = ceilMs(st.a + w - now)
	}
	res.Remaining = max(0, c-st.b)
	if st.b > 0 {
		res.ResetAfter = ceilMs(st.a + w - now)
	}
	return res
}

func fixedTTL(st *state, r Rule, now int64) int64 {
	if st.b == 0 {
		return 0
	}
	return st.a + r.Period - now
}

// slidingNormalize moves the state to the window holding now: the current
// count becomes the previous one when exactly one window passed.
func slidingNormalize(st *state, w, now int64) int64 {
	now = max(now, st.a)
	cws := align(now, w)
	switch st.a {
	case cws:
	case cws - w:
		st.b, st.c = 0, st.b
	default:
		st.b, st.c = 0, 0
	}
	st.a = cws
	return now
}

// slidingChange carries the current count into the window of the new length
// that holds now and drops the previous window's count.
func slidingChange(st *state, old, r Rule, now int64) {
	if r.Period != old.Period {
		st.a = align(now, r.Period)
		st.c = 0
	}
}

// slidingWeighted is floor(prev * (W - elapsed) / W).
func slidingWeighted(st *state, w, now int64) int64 {
	return int64(mulDiv(uint64(st.c), uint64(w-(now-st.a)), uint64(w)))
}

func slidingEval(st *state, r Rule, n, now int64) Result {
	c, w := r.Limit, r.Period
	res := Result{Kind: KindSliding, Limit: c}
	weighted := slidingWeighted(st, w, now)
	if n < 0 { // a refund: cur = max(0, cur - |n|); prev is history
		res.Allowed = true
		st.b = max(0, st.b+n)
	} else if st.b+weighted+n <= c {
		res.Allowed = true
		st.b += n
	} else if n > c {
		res.RetryAfter = -1
	} else {
		// Smallest x (ns into a window) with floor(P*(W-x)/W) <= k, i.e.
		// x = floor((P-k-1)*W/P) + 1; in this window with P = prev when the
		// current count leaves room, else in the next with P = cur.
		var at int64
		if k := c - n - st.b; k >= 0 {
			at = int64(mulDiv(uint64(st.c-k-1), uint64(w), uint64(st.c))) + 1
		} else {
			k = c - n
			at = w + int64(mulDiv(uint64(st.b-k-1), uint64(w), uint64(st.b))) + 1
		}
		res.RetryAfter = ceilMs(st.a + at - now)
	}
	res.Remaining = max(0, c-(st.b+weighted))
	res.ResetAfter = ceilMs(slidingTTL(st, r, now))
	return res
}

func slidingTTL(st *state, r Rule, now int64) int64 {
	switch {
	case st.b > 0:
		return st.a + 2*r.Period - now
	case st.c > 0:
		return st.a + r.Period - now
	}
	return 0
}
