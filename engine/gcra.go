package engine

// CL.THROTTLE is redis-cell's GCRA. Rule.Limit is max_burst+1, Rule.Period
// the emission interval T; the one state word a is the theoretical arrival
// time (tat). The state is initial once tat <= now. checkRule keeps T*Limit
// and T*cost within 2^62, so the offsets from now below fit in uint64.

// gcraEval decides a quantity of n at now. A fresh key has tat == now.
func gcraEval(st *state, r Rule, n, now int64) Result {
	t := r.Period
	tau := uint64(t * r.Limit)
	inc := uint64(t * n)
	base := uint64(elapsed(st.a, now)) // max(tat, now) - now, < 2^63
	rel := base + inc                  // new_tat - now
	res := Result{Kind: KindGCRA, Limit: r.Limit, RetryAfter: -1}
	var ttl uint64
	if rel > tau { // diff = tau - rel < 0: limited
		if inc <= tau {
			res.RetryAfter = secsUp(int64(min(rel-tau, uint64(maxGCRASpan))))
		}
		ttl = base
	} else {
		res.Allowed = true
		ttl = rel
		if n > 0 {
			st.a = satAdd(now, int64(rel))
		}
	}
	if ttl < tau {
		res.Remaining = int64((tau - ttl) / uint64(t))
	}
	res.ResetAfter = secsUp(int64(min(ttl, uint64(maxGCRASpan))))
	return res
}

func gcraTTL(st *state, now int64) int64 { return elapsed(st.a, now) }
