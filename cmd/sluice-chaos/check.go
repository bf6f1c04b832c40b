package main

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// The checks over the recorded history.
//
// Time. Every decision is made at a time the leader stamped into its log
// entry, with its own clock (off by at most the largest skew S), and
// applied at max(stamp, last applied time), on one machine whose wall clock
// every process shares. So an op sent at wall time c and answered at r was
// decided at a stamped time in [c - S, r + S]: the checks widen every
// interval by the slack S (plus a margin) and are otherwise exact.

// violation is one broken promise found in the history.
type violation struct {
	Check string // bound, monotonic, ledger, linearizable, replicas, reply, process, recovery
	Key   string
	Msg   string
}

func (v violation) String() string {
	if v.Key == "" {
		return fmt.Sprintf("[%s] %s", v.Check, v.Msg)
	}
	return fmt.Sprintf("[%s] %s: %s", v.Check, v.Key, v.Msg)
}

// checker holds what the checks need besides the history.
type checker struct {
	keys      []*keySpec
	startWall int64 // wall time (unix ns) of the monotonic zero of Call and Return
	slack     int64 // ns: the largest clock skew plus a margin
}

// wall turns an op timestamp into wall time.
func (ch *checker) wall(t int64) int64 { return ch.startWall + t }

// byKey groups the ops by key, in Call order.
func byKey(ops []op) map[int][]op {
	m := map[int][]op{}
	for _, o := range ops {
		m[o.Key] = append(m[o.Key], o)
	}
	for _, os := range m {
		sort.Slice(os, func(i, j int) bool { return os[i].Call < os[j].Call })
	}
	return m
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// maxAdmitted is the most units the key's algorithm can admit at stamped
// times within [from, to] (unix ns), starting from any state:
//
//   - token, leaky: the capacity, plus one unit per Period elapsed;
//   - fixed, sliding: the limit in every epoch-aligned window the span
//     touches (a sliding window's own count never passes the limit);
//   - log: the limit in every stretch of one window (each such stretch is
//     inside some (t - W, t] checked at an admission t).
func maxAdmitted(k *keySpec, from, to int64) int64 {
	p := int64(k.Period)
	switch k.Kind {
	case kindToken, kindLeaky:
		return k.Limit + (to-from)/p
	case kindFixed, kindSliding:
		return k.Limit * (floorDiv(to, p) - floorDiv(from, p) + 1)
	}
	return k.Limit * ((to-from)/p + 1)
}

// checkBounds: the acknowledged admissions of each key never exceed what its
// algorithm allows over the stamped time between the first and the last of
// them.
func (ch *checker) checkBounds(ops []op) (vs []violation, admitted int64) {
	groups := byKey(ops)
	for _, k := range ch.keys {
		var total int64
		first, last := int64(-1), int64(-1)
		for _, o := range groups[k.ID] {
			if n := o.admits(); n > 0 {
				total += n
				if first < 0 || o.Call < first {
					first = o.Call
				}
				last = max(last, o.Return)
			}
		}
		admitted += total
		if total == 0 {
			continue
		}
		from, to := ch.wall(first)-ch.slack, ch.wall(last)+ch.slack
		if bound := maxAdmitted(k, from, to); total > bound {
			vs = append(vs, violation{Check: "bound", Key: k.Name, Msg: fmt.Sprintf(
				"%d units admitted over %v (stamped, with slack), at most %d allowed",
				total, time.Duration(to-from).Round(time.Millisecond), bound)})
		}
	}
	return vs, admitted
}

// monotonicWindow is how many of the latest answered ops before an op it
// is compared with.
const monotonicWindow = 32

// checkMonotonic: no acknowledged admission is forgotten. For two answered
// ops A and B on a key, A answered before B was sent, B's remaining is at
// most A's, less what B admitted, plus what can come back between them:
//
//   - zero-refill keys: nothing comes back;
//   - token, leaky: ceil(elapsed / Period) units (a fraction of a unit
//     already there may complete one more);
//   - fixed: nothing within one window; pairs in different windows are
//     not compared;
//   - sliding, log: not checked (units come back as old ones leave the
//     window, which the history does not tell).
func (ch *checker) checkMonotonic(ops []op) []violation {
	var vs []violation
	groups := byKey(ops)
	for _, k := range ch.keys {
		if !k.Zero && (k.Kind == kindSliding || k.Kind == kindLog) {
			continue
		}
		var done []op
		for _, o := range groups[k.ID] {
			if o.Status == stOK {
				done = append(done, o)
			}
		}
		byReturn := slices.Clone(done)
		sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].Return < byReturn[j].Return })
		found := 0
		for _, b := range done {
			// The ops answered before b was sent.
			n := sort.Search(len(byReturn), func(i int) bool { return byReturn[i].Return >= b.Call })
			for _, a := range byReturn[max(0, n-monotonicWindow):n] {
				allowed, ok := ch.maxRemaining(k, &a, &b)
				if !ok || b.remaining(k) <= allowed {
					continue
				}
				if found < 3 {
					vs = append(vs, violation{Check: "monotonic", Key: k.Name, Msg: fmt.Sprintf(
						"remaining %d after %s, but %d after %s answered earlier (at most %d possible)",
						b.remaining(k), describeOp(&b), a.remaining(k), describeOp(&a), allowed)})
				}
				found++
			}
		}
		if found > 3 {
			vs = append(vs, violation{Check: "monotonic", Key: k.Name, Msg: fmt.Sprintf("%d more such pairs", found-3)})
		}
	}
	return vs
}

// maxRemaining is the most B may report remaining given A, or false when
// the pair says nothing.
func (ch *checker) maxRemaining(k *keySpec, a, b *op) (int64, bool) {
	base := a.remaining(k) - b.admits()
	if k.Zero {
		return base, true
	}
	p := int64(k.Period)
	from, to := ch.wall(a.Call)-ch.slack, ch.wall(b.Return)+ch.slack
	switch k.Kind {
	case kindToken, kindLeaky:
		return base + (to-from+p-1)/p, true
	case kindFixed:
		if floorDiv(from, p) == floorDiv(to, p) {
			return base, true
		}
	}
	return 0, false
}

// describeOp renders an op for a violation message.
func describeOp(o *op) string {
	what := fmt.Sprintf("cost %d", o.Cost)
	if o.Peek {
		what = "RL.PEEK"
	}
	res := fmt.Sprintf("allowed=%v remaining=%d", o.Allowed, o.Remaining)
	if o.Nil {
		res = "nil"
	}
	return fmt.Sprintf("%s via n%d (worker %d, sent %v, answered %v: %s)", what, o.Node+1, o.Worker,
		time.Duration(o.Call).Round(time.Microsecond), time.Duration(o.Return).Round(time.Microsecond), res)
}

// finalRead is a key's RL.PEEK through each node after the run.
type finalRead struct {
	key   *keySpec
	nodes []string // the reply through each node
	rem   int64    // remaining, when every node agrees
	ok    bool
}

// checkLedger: after the run, every node reports the same state for each
// key, and a zero-refill key has lost exactly the units of the decisions
// that applied: at least every acknowledged admission, at most those plus
// the ones whose outcome is unknown.
func (ch *checker) checkLedger(ops []op, reads []finalRead) []violation {
	var vs []violation
	groups := byKey(ops)
	for _, fr := range reads {
		k := fr.key
		if !fr.ok {
			vs = append(vs, violation{Check: "ledger", Key: k.Name, Msg: fmt.Sprintf("nodes disagree or fail: %v", fr.nodes)})
			continue
		}
		if !k.Zero {
			continue
		}
		var sure, maybe int64
		for _, o := range groups[k.ID] {
			sure += o.admits()
			maybe += o.mayAdmit()
		}
		used := k.Limit - fr.rem
		switch {
		case used < sure:
			vs = append(vs, violation{Check: "ledger", Key: k.Name, Msg: fmt.Sprintf(
				"%d units acknowledged as admitted, but the final state shows %d used: admissions were forgotten", sure, used)})
		case used > maybe:
			vs = append(vs, violation{Check: "ledger", Key: k.Name, Msg: fmt.Sprintf(
				"the final state shows %d units used, but at most %d can have been admitted (%d acknowledged)", used, maybe, sure)})
		}
	}
	return vs
}

// checkReplies: every reply is one the workload can get.
func checkReplies(keys []*keySpec, ops []op) []violation {
	var vs []violation
	n := 0
	for _, o := range ops {
		if o.Status != stUnexpected {
			continue
		}
		if n < 10 {
			vs = append(vs, violation{Check: "reply", Key: keys[o.Key].Name, Msg: fmt.Sprintf("%s: %s", describeOp(&o), o.Err)})
		}
		n++
	}
	if n > 10 {
		vs = append(vs, violation{Check: "reply", Msg: fmt.Sprintf("%d more unexpected replies", n-10)})
	}
	return vs
}
