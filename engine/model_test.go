package engine

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
)

// The reference model: obviously-correct, slow versions of each algorithm.
// Levels and estimates are exact big.Rat; windows are a map of window start
// to count; the log is a plain slice. Replies that are durations (retry_after,
// reset_after, TTL) are not computed from formulas but found by searching for
// the first instant at which, with nothing else happening, the call would be
// allowed (or the state would be initial), so the engine's closed forms are
// checked against the definitions (docs/commands.md, "Limiter commands").
// GCRA follows redis-cell's formulas (docs/commands.md, "CL.THROTTLE") in
// big.Int arithmetic.

type mKey struct {
	rule   Rule
	level  *big.Rat        // token, leaky: level (tokens = capacity - level)
	last   int64           // token, leaky: last time
	counts map[int64]int64 // fixed, sliding: window start -> count
	hw     int64           // fixed, sliding: latest window start seen
	log    []int64         // log: admitted timestamps
	tat    int64           // gcra
}

func (k *mKey) clone() *mKey {
	c := *k
	if k.level != nil {
		c.level = new(big.Rat).Set(k.level)
	}
	c.counts = maps.Clone(k.counts)
	c.log = slices.Clone(k.log)
	return &c
}

type model struct{ keys map[string]*mKey }

func newModel() *model { return &model{keys: map[string]*mKey{}} }

func ratInt(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

// ratFloor is floor(r); the model only takes it of values that fit in int64.
func ratFloor(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for positive denominators
	if !q.IsInt64() {
		panic(fmt.Sprintf("model: floor(%v) overflows", r))
	}
	return q.Int64()
}

// ratCeil is ceil(r).
func ratCeil(r *big.Rat) *big.Int {
	q := new(big.Int).Div(new(big.Int).Neg(r.Num()), r.Denom())
	return q.Neg(q)
}

func fresh0(r Rule, now int64) *mKey {
	k := &mKey{rule: r, last: now, level: new(big.Rat), counts: map[int64]int64{}, tat: now}
	k.hw = align(now, r.Period)
	return k
}

// advance brings k forward to x (never backwards) and returns the effective
// time.
func (k *mKey) advance(x int64) int64 {
	r := k.rule
	switch r.Kind {
	case KindToken, KindLeaky:
		t := max(x, k.last)
		drained := new(big.Rat).SetFrac64(t-k.last, r.Period)
		k.level.Sub(k.level, drained)
		if k.level.Sign() < 0 {
			k.level.SetInt64(0)
		}
		k.last = t
		return t
	case KindFixed, KindSliding:
		t := max(x, k.hw)
		cws := align(t, r.Period)
		for ws := range k.counts {
			if ws != cws && (r.Kind == KindFixed || ws != cws-r.Period) {
				delete(k.counts, ws)
			}
		}
		k.hw = cws
		return t
	case KindLog:
		t := x
		if n := len(k.log); n > 0 {
			t = max(t, k.log[n-1])
		}
		k.log = slices.DeleteFunc(k.log, func(ts int64) bool { return ts <= t-r.Period })
		return t
	}
	return x
}

func (k *mKey) initial(t int64) bool {
	switch k.rule.Kind {
	case KindToken, KindLeaky:
		return k.level.Sign() == 0
	case KindFixed, KindSliding:
		for _, c := range k.counts {
			if c != 0 {
				return false
			}
		}
		return true
	case KindLog:
		return len(k.log) == 0
	}
	return k.tat <= t
}

// est is floor(cur + prev*(W-el)/W) for a sliding key advanced to t.
func (k *mKey) est(t int64) int64 {
	w := k.rule.Period
	cws := align(t, w)
	num := new(big.Int).Mul(big.NewInt(k.counts[cws-w]), big.NewInt(w-(t-cws)))
	e := new(big.Rat).SetFrac(num, big.NewInt(w))
	e.Add(e, ratInt(k.counts[cws]))
	return ratFloor(e)
}

// allowed reports whether cost n passes on k advanced to t.
func (k *mKey) allowed(n, t int64) bool {
	r := k.rule
	if n < 0 {
		return true // a refund
	}
	switch r.Kind {
	case KindToken, KindLeaky:
		return new(big.Rat).Add(k.level, ratInt(n)).Cmp(ratInt(r.Limit)) <= 0
	case KindFixed:
		return k.counts[align(t, r.Period)]+n <= r.Limit
	case KindSliding:
		return k.est(t)+n <= r.Limit
	case KindLog:
		return int64(len(k.log))+n <= r.Limit
	}
	panic("kind")
}

func (k *mKey) remaining(t int64) int64 {
	r := k.rule
	switch r.Kind {
	case KindToken, KindLeaky:
		return max(0, ratFloor(new(big.Rat).Sub(ratInt(r.Limit), k.level)))
	case KindFixed:
		return max(0, r.Limit-k.counts[align(t, r.Period)])
	case KindSliding:
		return max(0, r.Limit-k.est(t))
	case KindLog:
		return max(0, r.Limit-int64(len(k.log)))
	}
	panic("kind")
}

// search returns the least x in [lo, hi] with pred(x) true, pred monotone
// (hi if none). It gallops from lo first, as most answers are small.
func search(lo, hi int64, pred func(int64) bool) int64 {
	for step := int64(1); lo+step < hi; step *= 2 {
		if pred(lo + step) {
			hi = lo + step
			break
		}
		lo += step
	}
	for lo < hi {
		m := lo + (hi-lo)/2
		if pred(m) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// untilMs is the least whole number of ms m >= lo from t at which pred holds
// for k left alone, saturated at 2^53.
func (k *mKey) untilMs(t, lo int64, pred func(*mKey, int64) bool) int64 {
	return search(lo, min(maxReply, (math.MaxInt64-t)/nsPerMs), func(m int64) bool {
		c := k.clone()
		x := c.advance(t + m*nsPerMs)
		return pred(c, x)
	})
}

// ttlNs is the least number of ns from now until k is initial.
func (k *mKey) ttlNs(now int64) int64 {
	return search(0, 1<<62, func(x int64) bool {
		c := k.clone()
		return c.initial(c.advance(now + x))
	})
}

// change applies rule r to k (advanced to t, not initial).
func (k *mKey) change(r Rule, t int64) {
	old := k.rule
	k.rule = r
	switch r.Kind {
	case KindToken, KindLeaky:
		if r.Period != old.Period {
			// Credit is kept in whole ns of the new interval, rounding the
			// level up: level = ceil(level*I)/I.
			x := new(big.Rat).Mul(k.level, ratInt(r.Period))
			k.level.SetFrac(ratCeil(x), big.NewInt(r.Period))
		}
		if r.Limit != old.Limit {
			if r.Kind == KindToken { // tokens = min(tokens, capacity)
				tokens := new(big.Rat).Sub(ratInt(old.Limit), k.level)
				if tokens.Cmp(ratInt(r.Limit)) > 0 {
					tokens = ratInt(r.Limit)
				}
				k.level.Sub(ratInt(r.Limit), tokens)
			} else if k.level.Cmp(ratInt(r.Limit)) > 0 {
				k.level = ratInt(r.Limit)
			}
		}
	case KindFixed, KindSliding:
		if r.Period != old.Period {
			c := k.counts[align(t, old.Period)]
			k.hw = align(t, r.Period)
			k.counts = map[int64]int64{k.hw: c}
		}
	case KindLog:
		k.advance(t)
	}
}

func (m *model) decide(now int64, key string, r Rule, n int64) Result {
	k := m.keys[key]
	if k != nil && k.rule.Kind != r.Kind {
		if m.live(now, key) {
			return Result{Err: ErrWrongType}
		}
		delete(m.keys, key)
		k = nil
	}
	t := now
	if k != nil {
		t = k.advance(now)
		if k.initial(t) {
			delete(m.keys, key)
			k, t = nil, now
		}
	}
	var c *mKey
	if k != nil {
		c = k.clone()
		if c.rule != r {
			c.change(r, t)
		}
	} else {
		c = fresh0(r, now)
	}
	if r.Kind == KindGCRA {
		return m.gcra(key, c, now, n)
	}
	res := Result{Kind: r.Kind, Limit: r.Limit}
	if c.allowed(n, t) {
		res.Allowed = true
		switch r.Kind {
		case KindToken, KindLeaky:
			c.level.Add(c.level, ratInt(n))
			if c.level.Sign() < 0 {
				c.level.SetInt64(0)
			}
		case KindFixed, KindSliding:
			c.counts[align(t, r.Period)] = max(0, c.counts[align(t, r.Period)]+n)
		case KindLog:
			for range n {
				c.log = append(c.log, t)
			}
			if n < 0 {
				c.log = c.log[:max(0, int64(len(c.log))+n)]
			}
		}
	} else if n > r.Limit {
		res.RetryAfter = -1
	} else {
		res.RetryAfter = c.untilMs(t, 1, func(c *mKey, x int64) bool { return c.allowed(n, x) })
	}
	res.Remaining = c.remaining(t)
	res.ResetAfter = c.untilMs(t, 0, (*mKey).initial)
	if n != 0 {
		if c.initial(t) {
			delete(m.keys, key)
		} else {
			m.keys[key] = c
		}
	}
	return res
}

func (m *model) gcra(key string, c *mKey, now, n int64) Result {
	bi := big.NewInt
	tT := bi(c.rule.Period)
	tau := new(big.Int).Mul(tT, bi(c.rule.Limit))
	inc := new(big.Int).Mul(tT, bi(n))
	tat := bi(c.tat)
	newTat := new(big.Int).Add(bi(max(c.tat, now)), inc)
	allowAt := new(big.Int).Sub(newTat, tau)
	diff := new(big.Int).Sub(bi(now), allowAt)
	secs := func(ns *big.Int) int64 {
		if ns.Sign() <= 0 {
			return 0
		}
		msec := new(big.Int).Quo(ns, bi(nsPerMs))
		s, rem := new(big.Int).QuoRem(msec, bi(1000), new(big.Int))
		if rem.Sign() != 0 {
			s.Add(s, bi(1))
		}
		return s.Int64()
	}
	res := Result{Kind: KindGCRA, Limit: c.rule.Limit, RetryAfter: -1}
	var ttl *big.Int
	if diff.Sign() < 0 {
		if inc.Cmp(tau) <= 0 {
			res.RetryAfter = secs(new(big.Int).Neg(diff))
		}
		ttl = new(big.Int).Sub(tat, bi(now))
	} else {
		res.Allowed = true
		ttl = new(big.Int).Sub(newTat, bi(now))
		if n > 0 {
			c.tat = newTat.Int64()
			m.keys[key] = c
		}
	}
	if rem := new(big.Int).Quo(new(big.Int).Sub(tau, ttl), tT); rem.Sign() > 0 {
		res.Remaining = rem.Int64()
	}
	res.ResetAfter = secs(ttl)
	return res
}

// live reports whether key has state at now.
func (m *model) live(now int64, key string) bool {
	k := m.keys[key]
	if k == nil {
		return false
	}
	c := k.clone()
	return !c.initial(c.advance(now))
}

// ttl is the key's TTL in ns at now, -2 if it has no state.
func (m *model) ttl(now int64, key string) int64 {
	if !m.live(now, key) {
		return -2
	}
	return m.keys[key].ttlNs(now)
}

func (m *model) sweep(now int64) {
	for key := range m.keys {
		if !m.live(now, key) {
			delete(m.keys, key)
		}
	}
}

func sameResult(a, b Result) bool {
	if (a.Err == nil) != (b.Err == nil) || (a.Err != nil && !errors.Is(a.Err, b.Err)) {
		return false
	}
	return a.Kind == b.Kind && a.Allowed == b.Allowed && a.Limit == b.Limit &&
		a.Remaining == b.Remaining && a.RetryAfter == b.RetryAfter && a.ResetAfter == b.ResetAfter
}

func fmtResult(r Result) string {
	if r.Err != nil {
		return "err " + r.Err.Error()
	}
	return fmt.Sprintf("%v allowed=%v limit=%d remaining=%d retry=%d reset=%d",
		r.Kind, r.Allowed, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter)
}

// ruleVariants are the rules a randomized run draws from, per kind,
// extremes included (1 ns intervals, 366-day windows, 2^40 limits).
var ruleVariants = map[Kind][]Rule{
	KindToken: {
		{KindToken, 5, sec}, {KindToken, 3, 1_428_571_428}, {KindToken, 7, 250 * ms},
		{KindToken, 1, 7 * ms}, {KindToken, 40, ms + 3}, {KindToken, 1000000, 1}, {KindToken, 3, maxPeriod},
	},
	KindLeaky: {
		{KindLeaky, 5, sec}, {KindLeaky, 3, 1_428_571_428}, {KindLeaky, 7, 250 * ms},
		{KindLeaky, 1, 7 * ms}, {KindLeaky, 40, ms + 3}, {KindLeaky, 1000000, 1}, {KindLeaky, 3, maxPeriod},
	},
	KindFixed: {
		{KindFixed, 5, min_}, {KindFixed, 3, 10 * sec}, {KindFixed, 10, sec + 3},
		{KindFixed, 1, 7 * ms}, {KindFixed, 40, 1500 * ms}, {KindFixed, 1000, 1}, {KindFixed, 3, maxPeriod},
	},
	KindSliding: {
		{KindSliding, 7, min_}, {KindSliding, 3, 10 * sec}, {KindSliding, 10, sec + 3},
		{KindSliding, 1, 7 * ms}, {KindSliding, 40, 1500 * ms}, {KindSliding, 1000, 3},
		{KindSliding, 3, maxPeriod}, {KindSliding, 1 << 40, 7 * ms},
	},
	KindLog: {
		{KindLog, 2, min_}, {KindLog, 3, 10 * sec}, {KindLog, 10, sec + 3},
		{KindLog, 1, 7 * ms}, {KindLog, 40, 1500 * ms}, {KindLog, 100, 1}, {KindLog, 3, maxPeriod},
	},
	KindGCRA: {
		{KindGCRA, 16, 2 * sec}, {KindGCRA, 1, 2 * sec}, {KindGCRA, 5, sec},
		{KindGCRA, 3, 333_333_333}, {KindGCRA, 10, 7 * ms}, {KindGCRA, 1 << 20, 1}, {KindGCRA, 2, 1 << 40},
	},
}

// runDifferential drives the engine and the model with one random sequence.
func runDifferential(t *testing.T, kind Kind, seed uint64, steps int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, uint64(kind)))
	variants := ruleVariants[kind]
	// Each key has a usual rule, changed now and then.
	keys := []string{"a", "b", "c"}
	usual := map[string]Rule{}
	for _, k := range keys {
		usual[k] = variants[rng.IntN(len(variants))]
	}
	other := Rule{KindFixed, 3, sec}
	if kind == KindFixed {
		other = Rule{KindToken, 3, sec}
	}
	e := New(Config{Stripes: 2, MaxLogLimit: 1000})
	m := newModel()
	now := t0 + rng.Int64N(min_)
	for i := range steps {
		key := keys[rng.IntN(len(keys))]
		r := usual[key]
		if rng.IntN(20) == 0 {
			r = variants[rng.IntN(len(variants))]
			usual[key] = r
		}
		if rng.IntN(50) == 0 {
			r = other
		}
		w := r.Period
		if kind == KindToken || kind == KindLeaky || kind == KindGCRA {
			w = r.Period * r.Limit
		}
		switch p := rng.IntN(100); {
		case p < 55:
			now += rng.Int64N(w/4 + 1)
		case p < 70:
		case p < 80:
			now += rng.Int64N(3*w + 1)
		case p < 86 && kind != KindGCRA:
			now -= rng.Int64N(w + 1)
		case p < 93:
			now = align(now, r.Period) + r.Period + rng.Int64N(3) - 1
		default:
			now += rng.Int64N(1000)
		}
		if now > t0+1<<60 {
			// Long windows walk time far ahead: start again well below
			// the end of int64 time.
			now = t0 + rng.Int64N(min_)
			e.Reset()
			m = newModel()
		}
		n := int64(0)
		if rng.IntN(7) != 0 {
			n = 1 + rng.Int64N(min(r.Limit+1, 4))
			if rng.IntN(10) == 0 {
				n = 1 + rng.Int64N(r.Limit+1)
			}
		}
		if kind != KindGCRA && rng.IntN(8) == 0 { // a refund
			n = -1 - rng.Int64N(min(r.Limit, 4))
		}
		if rng.IntN(40) == 0 {
			e.Sweep(now, 1<<20)
			m.sweep(now)
		}
		got := e.Decide(now, []byte(key), r, n)
		want := m.decide(now, key, r, n)
		if !sameResult(got, want) {
			t.Fatalf("seed %d step %d: %s %v cost %d at t0%+d:\n got  %s\n want %s",
				seed, i, key, r, n, now-t0, fmtResult(got), fmtResult(want))
		}
		for _, k := range keys {
			ex := e.inspect(now, OpExists, []byte(k)).Count == 1
			if mex := m.live(now, k); ex != mex {
				t.Fatalf("seed %d step %d key %s at t0%+d: exists %v, model %v", seed, i, k, now-t0, ex, mex)
			}
		}
		if ttl, mttl := e.inspect(now, OpTTL, []byte(key)).TTL, m.ttl(now, key); ttl != mttl {
			t.Fatalf("seed %d step %d key %s at t0%+d: ttl %d, model %d", seed, i, key, now-t0, ttl, mttl)
		}
		if e.Len() > len(m.keys) {
			t.Fatalf("seed %d step %d: engine holds %d keys, model %d", seed, i, e.Len(), len(m.keys))
		}
	}
}

func TestDifferential(t *testing.T) {
	seeds := []uint64{1, 2, 3, 42, 20240601}
	steps := 3000
	if testing.Short() || raceEnabled {
		// The race detector slows the big.Rat model tenfold; the
		// sequences are single-goroutine, so -race adds nothing here.
		seeds, steps = seeds[:2], 1000
	}
	// The kinds OpDecide decides, from the table of kinds: a kind without
	// rules in ruleVariants fails TestModelledKinds.
	for kind := KindNone + 1; kind < NumKinds; kind++ {
		if sh := kinds[kind].shape; sh != inWords && sh != inLog || len(ruleVariants[kind]) == 0 {
			continue
		}
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			for _, seed := range seeds {
				t.Logf("seed %d", seed)
				runDifferential(t, kind, seed, steps)
			}
		})
	}
}
