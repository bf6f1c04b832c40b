package engine

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// The reference model of RL.ALL and of concurrency leases, on top of the
// model of model_test.go, and the differential tests that drive them.

// cloneModel returns a deep copy of m's limiter keys.
func (m *model) cloneModel() *model {
	c := newModel()
	for k, v := range m.keys {
		c.keys[k] = v.clone()
	}
	return c
}

// all is RL.ALL by its definition: each limit decided on its own copy of
// the state; when every one allows, every one is charged; when any denies,
// nothing changes and those that would have allowed reply their state as
// it stands.
func (m *model) all(now int64, lims []Limit) Result {
	for _, l := range lims {
		if k := m.keys[string(l.Key)]; k != nil && k.rule.Kind != l.Rule.Kind && m.live(now, string(l.Key)) {
			return Result{Err: ErrWrongType}
		}
	}
	each := make([]Result, len(lims))
	allowed := true
	for i, l := range lims {
		each[i] = m.cloneModel().decide(now, string(l.Key), l.Rule, l.Cost)
		allowed = allowed && each[i].Allowed
	}
	if allowed {
		for i, l := range lims {
			each[i] = m.decide(now, string(l.Key), l.Rule, l.Cost)
		}
	} else {
		for i, l := range lims {
			if each[i].Allowed {
				each[i] = m.cloneModel().decide(now, string(l.Key), l.Rule, 0)
				each[i].Allowed, each[i].RetryAfter = true, 0
			}
		}
	}
	res := Result{Allowed: allowed, Each: each, Kind: each[0].Kind, Limit: each[0].Limit, Remaining: each[0].Remaining}
	for _, r := range each {
		if r.Remaining < res.Remaining {
			res.Kind, res.Limit, res.Remaining = r.Kind, r.Limit, r.Remaining
		}
		res.ResetAfter = max(res.ResetAfter, r.ResetAfter)
	}
	if !allowed {
		for _, r := range each {
			switch {
			case r.Allowed:
			case r.RetryAfter == -1 || res.RetryAfter == -1:
				res.RetryAfter = -1
			default:
				res.RetryAfter = max(res.RetryAfter, r.RetryAfter)
			}
		}
	}
	return res
}

func sameAll(a, b Result) bool {
	if !sameResult(a, b) || len(a.Each) != len(b.Each) {
		return false
	}
	for i := range a.Each {
		if !sameResult(a.Each[i], b.Each[i]) {
			return false
		}
	}
	return true
}

func fmtAll(r Result) string {
	s := fmtResult(r)
	for _, e := range r.Each {
		s += "\n    " + fmtResult(e)
	}
	return s
}

// TestDifferentialAll drives RL.ALL calls (charges, refunds, peeks, kind
// clashes) mixed with single decisions on four keys, on the engine and the
// model.
func TestDifferentialAll(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	steps := 1500
	if testing.Short() || raceEnabled {
		seeds, steps = seeds[:1], 600
	}
	var layered []Kind // RL.ALL's kinds, from the table of kinds
	for k := KindNone + 1; k < NumKinds; k++ {
		if k.Layerable() {
			layered = append(layered, k)
		}
	}
	for _, seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 77))
		keys := []string{"a", "b", "c", "d"}
		usual := map[string]Rule{}
		for _, k := range keys {
			kind := layered[rng.IntN(len(layered))]
			usual[k] = ruleVariants[kind][rng.IntN(3)] // the moderate variants
		}
		e := New(Config{Stripes: 2, MaxLogLimit: 1000})
		m := newModel()
		now := t0
		for i := range steps {
			now += rng.Int64N(3 * sec)
			if rng.IntN(30) == 0 {
				k := keys[rng.IntN(len(keys))]
				kind := layered[rng.IntN(len(layered))]
				usual[k] = ruleVariants[kind][rng.IntN(3)]
			}
			cost := func(r Rule) int64 {
				switch p := rng.IntN(10); {
				case p == 0:
					return 0
				case p < 3:
					return -1 - rng.Int64N(3)
				default:
					return 1 + rng.Int64N(min(r.Limit, 3))
				}
			}
			if rng.IntN(4) == 0 {
				k := keys[rng.IntN(len(keys))]
				r, n := usual[k], cost(usual[k])
				got, want := e.Decide(now, []byte(k), r, n), m.decide(now, k, r, n)
				if !sameResult(got, want) {
					t.Fatalf("seed %d step %d: %s %v cost %d:\n got  %s\n want %s", seed, i, k, r, n, fmtResult(got), fmtResult(want))
				}
				continue
			}
			perm := rng.Perm(len(keys))[:1+rng.IntN(len(keys))]
			var lims []Limit
			for _, j := range perm {
				r := usual[keys[j]]
				lims = append(lims, Limit{Key: []byte(keys[j]), Rule: r, Cost: cost(r)})
			}
			res := make([]Result, 1)
			e.Apply(now, []Op{{Code: OpAll, All: lims}}, res)
			got, want := res[0], m.all(now, lims)
			if !sameAll(got, want) {
				t.Fatalf("seed %d step %d: RL.ALL %v:\n got  %s\n want %s", seed, i, lims, fmtAll(got), fmtAll(want))
			}
			for _, k := range keys {
				if ex, mex := e.inspect(now, OpExists, []byte(k)).Count == 1, m.live(now, k); ex != mex {
					t.Fatalf("seed %d step %d key %s: exists %v, model %v", seed, i, k, ex, mex)
				}
				if ttl, mttl := e.inspect(now, OpTTL, []byte(k)).TTL, m.ttl(now, k); ttl != mttl {
					t.Fatalf("seed %d step %d key %s: ttl %d, model %d", seed, i, k, ttl, mttl)
				}
			}
		}
	}
}

// mConc is the model of a concurrency key: its stored limit and its leases.
type mConc struct {
	limit  int64
	leases map[string][2]int64 // token -> units, expiry
}

// heldAt is the units of the leases live at t.
func (c *mConc) heldAt(t int64) int64 {
	h := int64(0)
	for _, l := range c.leases {
		if l[1] > t {
			h += l[0]
		}
	}
	return h
}

// concModel models concurrency keys by their definition.
type concModel struct{ keys map[string]*mConc }

func (cm *concModel) prune(now int64, key string) *mConc {
	c := cm.keys[key]
	if c == nil {
		return nil
	}
	maps.DeleteFunc(c.leases, func(_ string, l [2]int64) bool { return l[1] <= now })
	if len(c.leases) == 0 {
		delete(cm.keys, key)
		return nil
	}
	return c
}

// reply fills the five integers, the durations found by search.
func (c *mConc) reply(now, limit, n int64, allowed bool) Result {
	res := Result{Kind: KindConcurrency, Allowed: allowed, Limit: limit, Remaining: max(0, limit-c.heldAt(now))}
	if !allowed {
		if n > limit {
			res.RetryAfter = -1
		} else {
			res.RetryAfter = search(1, maxReply, func(m int64) bool { return c.heldAt(now+m*nsPerMs)+n <= limit })
		}
	}
	res.ResetAfter = search(0, maxReply, func(m int64) bool { return c.heldAt(now+m*nsPerMs) == 0 })
	return res
}

func (cm *concModel) acquire(now int64, key string, r Rule, n int64, token string) Result {
	c := cm.prune(now, key)
	if c == nil {
		c = &mConc{limit: r.Limit, leases: map[string][2]int64{}}
		if n == 0 || n > r.Limit {
			return c.reply(now, r.Limit, n, n == 0)
		}
		cm.keys[key] = c
	}
	if n == 0 {
		return c.reply(now, r.Limit, 0, c.heldAt(now) <= r.Limit)
	}
	c.limit = r.Limit
	if l, ok := c.leases[token]; ok {
		c.leases[token] = [2]int64{l[0], now + r.Period}
		return c.reply(now, r.Limit, n, true)
	}
	if c.heldAt(now)+n <= r.Limit {
		c.leases[token] = [2]int64{n, now + r.Period}
		return c.reply(now, r.Limit, n, true)
	}
	return c.reply(now, r.Limit, n, false)
}

func (cm *concModel) release(now int64, key, token string) int64 {
	c := cm.prune(now, key)
	if c == nil {
		return 0
	}
	if _, ok := c.leases[token]; !ok {
		return 0
	}
	delete(c.leases, token)
	cm.prune(now, key)
	return 1
}

// TestDifferentialConcurrency drives acquires (new leases, renewals,
// peeks, costs above the limit, lowered limits), releases, peeks and
// sweeps on the engine and the model.
func TestDifferentialConcurrency(t *testing.T) {
	kind := leaseKind(t) // the lease kind, from the table of kinds
	steps := 4000
	if testing.Short() || raceEnabled {
		steps = 1500
	}
	for _, seed := range []uint64{1, 2, 3} {
		rng := rand.New(rand.NewPCG(seed, 99))
		e := New(Config{Stripes: 2, MaxLogLimit: 1000})
		cm := &concModel{keys: map[string]*mConc{}}
		keys := []string{"a", "b"}
		tokens := []string{"t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"}
		now := t0
		for i := range steps {
			now += rng.Int64N(2 * sec)
			if rng.IntN(10) == 0 {
				now += 1 + rng.Int64N(10*sec)
			}
			key := keys[rng.IntN(len(keys))]
			token := tokens[rng.IntN(len(tokens))]
			what := ""
			var got, want Result
			switch p := rng.IntN(10); {
			case p < 6:
				r := Rule{kind, []int64{3, 5, 8}[rng.IntN(3)], []int64{sec, 3 * sec, 7*sec + 3}[rng.IntN(3)]}
				n := 1 + rng.Int64N(3)
				switch rng.IntN(8) {
				case 0:
					n = 0
				case 1:
					n = 9
				}
				what = fmt.Sprintf("acquire %s %v %d %s", key, r, n, token)
				res := make([]Result, 1)
				e.Apply(now, []Op{{Code: OpAcquire, Key: []byte(key), Rule: r, Cost: n, Token: []byte(token)}}, res)
				got, want = res[0], cm.acquire(now, key, r, n, token)
			case p < 9:
				what = "release " + key + " " + token
				res := make([]Result, 1)
				e.Apply(now, []Op{{Code: OpRelease, Key: []byte(key), Token: []byte(token)}}, res)
				got = res[0]
				want = Result{Count: cm.release(now, key, token)}
			default:
				what = "peek " + key
				got = e.peek(now, []byte(key))
				if c := cm.prune(now, key); c != nil {
					want = cm.acquire(now, key, Rule{kind, c.limit, sec}, 0, "")
				}
			}
			if !sameResult(got, want) || got.Count != want.Count {
				t.Fatalf("seed %d step %d at t0%+d: %s:\n got  %s count %d\n want %s count %d", seed, i, now-t0, what, fmtResult(got), got.Count, fmtResult(want), want.Count)
			}
			if rng.IntN(50) == 0 {
				e.Sweep(now, 1<<20)
			}
			for _, k := range keys {
				c := cm.prune(now, k)
				if ex := e.inspect(now, OpExists, []byte(k)).Count == 1; ex != (c != nil) {
					t.Fatalf("seed %d step %d key %s: exists %v, model %v", seed, i, k, ex, c != nil)
				}
				if c == nil {
					continue
				}
				last := int64(0)
				for _, l := range c.leases {
					last = max(last, l[1])
				}
				if ttl := e.inspect(now, OpTTL, []byte(k)).TTL; ttl != last-now {
					t.Fatalf("seed %d step %d key %s: ttl %d, model %d", seed, i, k, ttl, last-now)
				}
				recs := exportKey(e, now, k)
				if len(recs.Leases) != len(c.leases) {
					t.Fatalf("seed %d step %d key %s: %d leases exported, model %d", seed, i, k, len(recs.Leases), len(c.leases))
				}
				if !slices.IsSortedFunc(recs.Leases, func(a, b Lease) int {
					if a.Expiry != b.Expiry {
						return int(a.Expiry - b.Expiry)
					}
					return slices.Compare(a.Token, b.Token)
				}) {
					t.Fatalf("seed %d step %d key %s: leases exported out of order", seed, i, k)
				}
			}
		}
	}
}

// exportKey returns key's exported record at now (zero when absent).
func exportKey(e *Engine, now int64, key string) Record {
	for i := range e.NumStripes() {
		for _, r := range e.ExportStripe(i, now) {
			if string(r.Key) == key {
				return r
			}
		}
	}
	return Record{}
}

// TestLeaseSnapshotDigest: a concurrency key exported and imported into
// another engine holds the same leases (same digest), keeps deciding the
// same, and Import refuses lease sets the engine could not have made.
func TestLeaseSnapshotDigest(t *testing.T) {
	a := New(Config{Stripes: 4, MaxLogLimit: 1000})
	r := Rule{KindConcurrency, 5, 10 * sec}
	for i, tok := range []string{"x", "y", "z"} {
		res := a.acquireOp(t0+int64(i)*sec, &Op{Code: OpAcquire, Key: []byte("c"), Rule: r, Cost: int64(i + 1), Token: []byte(tok)})
		if res.Err != nil || (i < 2) != res.Allowed {
			t.Fatalf("acquire %s: %s", tok, fmtResult(res))
		}
	}
	a.Apply(t0+3*sec, []Op{{Code: OpTime}}, make([]Result, 1)) // the clock's Last, for the digest
	b := New(Config{Stripes: 8, MaxLogLimit: 1000})
	b.SetClockState(a.ClockState())
	for i := range a.NumStripes() {
		for _, rec := range a.ExportStripe(i, t0+3*sec) {
			if err := b.Import(rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	da, na := a.Digest()
	db, nb := b.Digest()
	if da != db || na != nb || na != 1 {
		t.Fatalf("digests differ: %x (%d keys) vs %x (%d keys)", da, na, db, nb)
	}
	ra := a.acquireOp(t0+4*sec, &Op{Code: OpAcquire, Key: []byte("c"), Rule: r, Cost: 3, Token: []byte("w")})
	rb := b.acquireOp(t0+4*sec, &Op{Code: OpAcquire, Key: []byte("c"), Rule: r, Cost: 3, Token: []byte("w")})
	if !sameResult(ra, rb) || ra.Allowed || ra.RetryAfter != 6000 {
		t.Fatalf("after restore: %s vs %s", fmtResult(ra), fmtResult(rb))
	}
	for _, bad := range [][]Lease{
		{{Token: []byte("a"), Units: 0, Expiry: t0}},
		{{Token: nil, Units: 1, Expiry: t0}},
		{{Token: []byte("b"), Units: 1, Expiry: t0 + 1}, {Token: []byte("a"), Units: 1, Expiry: t0}},
		{{Token: []byte("a"), Units: 1, Expiry: t0}, {Token: []byte("a"), Units: 1, Expiry: t0 + 1}},
	} {
		if err := b.Import(Record{Key: []byte("bad"), Rule: r, Leases: bad}); !errors.Is(err, ErrBadRule) {
			t.Fatalf("Import %v: %v", bad, err)
		}
	}
}
