package engine

import (
	"errors"
	"maps"
	"testing"
)

// fuzzKinds are the kinds FuzzEngineOps draws rules from.
var fuzzKinds = []Kind{KindToken, KindLeaky, KindFixed, KindSliding, KindLog, KindGCRA}

// fuzzOps decodes fuzz input: every byte read past the end is 0, and done
// reports that the input is used up.
type fuzzOps struct {
	b []byte
	i int
}

func (f *fuzzOps) done() bool { return f.i >= len(f.b) }

func (f *fuzzOps) next() byte {
	if f.i >= len(f.b) {
		return 0
	}
	c := f.b[f.i]
	f.i++
	return c
}

// u16 reads two bytes as a little-endian number.
func (f *fuzzOps) u16() int64 { return int64(f.next()) | int64(f.next())<<8 }

// fuzzStep is one decoded step of FuzzEngineOps.
type fuzzStep struct {
	key   string
	rule  Rule
	cost  int64
	sweep bool
}

// decodeStep reads one step and moves now (never below t0). Each step is
// six to eight bytes:
//
//	b0: key (3 keys) and whether to sweep first
//	b1: kind (6) and rule variant (7 or 8 per kind)
//	b2: how time moves: not at all, by a fraction of the rule's span,
//	    by up to 3 spans, backwards by up to a span, to a window boundary
//	    (-1, 0 or +1 ns), or by a few ns
//	b3, b4: the magnitude of the move
//	b5: the cost: 0 (a peek), 1..4, or up to limit+1
func decodeStep(f *fuzzOps, now *int64) fuzzStep {
	b0, b1, b2 := f.next(), f.next(), f.next()
	kind := fuzzKinds[int(b1)%len(fuzzKinds)]
	variants := ruleVariants[kind]
	st := fuzzStep{
		key:   []string{"a", "b", "c"}[b0%3],
		rule:  variants[int(b1)/len(fuzzKinds)%len(variants)],
		sweep: b0/3%16 == 0,
	}
	r := st.rule
	span := r.Period
	if kind == KindToken || kind == KindLeaky || kind == KindGCRA {
		span = r.Period * r.Limit
	}
	mag := f.u16()
	// part is the fraction mag/65535 of x (x <= 3*2^62: no overflow).
	part := func(x int64) int64 { return int64(float64(x) * float64(mag) / 65535) }
	switch b2 % 8 {
	case 0, 1:
	case 2, 3:
		*now += part(span / 4)
	case 4:
		*now += part(3 * span)
	case 5:
		*now -= part(span)
	case 6:
		*now = align(*now, r.Period) + r.Period + mag%3 - 1
	case 7:
		*now += mag
	}
	*now = max(*now, t0)
	switch c := f.next(); {
	case c < 36:
		st.cost = 0
	case c < 220:
		st.cost = 1 + int64(c)%min(r.Limit+1, 4)
	default:
		st.cost = 1 + int64(f.u16())%(r.Limit+1)
	}
	return st
}

// decodeAll reads an RL.ALL of one to three limits on distinct keys of the
// five RL.* kinds, with costs from a refund to more than the limit.
func decodeAll(f *fuzzOps, base int64) []Limit {
	b := f.next()
	n := 1 + int(b%3)
	keys := [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}}[b/3%3]
	lims := make([]Limit, n)
	for i := range lims {
		c := f.next()
		kind := fuzzKinds[int(c)%5]
		variants := ruleVariants[kind]
		r := variants[int(c)/5%len(variants)]
		cost := int64(f.next()%8) - 2 + base%2
		if cost > r.Limit+1 {
			cost = r.Limit + 1
		}
		lims[i] = Limit{Key: []byte(keys[i]), Rule: r, Cost: cost}
	}
	return lims
}

// FuzzEngineOps decodes the input into a sequence of decisions on three
// keys, with rules of every kind (extremes included), time moving forwards,
// backwards and onto window boundaries, peeks, kind changes (WRONGTYPE) and
// sweeps, and now and then an RL.ALL (or Envoy's rate limit op) over the
// same keys, an RL.ACQUIRE or
// RL.RELEASE on two lease keys, or a refund, and runs it on the engine and
// on the reference models of model_test.go and model_ext_test.go: every field of every reply, and every key's existence and
// TTL after each step, must agree.
func FuzzEngineOps(f *testing.F) {
	// Seeds: a few hand-made sequences; testdata/fuzz/FuzzEngineOps holds
	// more.
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 100, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0, 0, 100})
	f.Add([]byte{1, 2, 6, 1, 0, 200, 1, 2, 6, 2, 0, 200, 1, 2, 6, 0, 0, 10, 1, 3, 2, 255, 255, 250, 7, 0})
	f.Add([]byte{2, 4, 4, 0, 128, 210, 2, 4, 5, 0, 64, 60, 2, 5, 3, 9, 9, 240, 2, 5, 1, 0, 0, 20})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 6*512 {
			return // the model is slow: keep each input short
		}
		e := New(Config{Stripes: 2, MaxLogLimit: 1000})
		m := newModel()
		cm := &concModel{keys: map[string]*mConc{}}
		now := t0
		in := &fuzzOps{b: data}
		for i := 0; !in.done(); i++ {
			st := decodeStep(in, &now)
			if now > t0+1<<60 {
				return // far beyond any real clock: the model's search overflows
			}
			if st.sweep {
				e.Sweep(now, 1<<20)
				m.sweep(now)
				// Sweep drops a lease key only once none of its leases is
				// live (time may go back here, never in a server).
				maps.DeleteFunc(cm.keys, func(_ string, c *mConc) bool { return c.heldAt(now) == 0 })
			}
			switch in.b[min(in.i, len(in.b))-min(in.i, 1)] % 4 { // the step's last byte picks an extra op
			case 1:
				lims := decodeAll(in, st.cost)
				res := []Result{e.all(now, lims, nil)} // not Apply: its clock never goes back
				if want := m.all(now, lims); !sameAll(res[0], want) {
					t.Fatalf("step %d: RL.ALL %v at t0%+d:\n got  %s\n want %s", i, lims, now-t0, fmtAll(res[0]), fmtAll(want))
				}
			case 2:
				b := in.next()
				key, token := []string{"x", "y"}[b%2], []string{"t1", "t2", "t3", "t4"}[b/2%4]
				res := make([]Result, 1)
				var want Result
				if b/8%4 == 0 {
					res[0] = e.release(now, []byte(key), []byte(token))
					want.Count = cm.release(now, key, token)
				} else {
					r := Rule{KindConcurrency, 1 + int64(b/32), []int64{sec, 7 * ms, 3 * min_}[b%3]}
					n := int64(in.next() % 5)
					res[0] = e.acquireOp(now, &Op{Code: OpAcquire, Key: []byte(key), Rule: r, Cost: n, Token: []byte(token)})
					want = cm.acquire(now, key, r, n, token)
				}
				if !sameResult(res[0], want) || res[0].Count != want.Count {
					t.Fatalf("step %d: lease op on %s at t0%+d:\n got  %s\n want %s", i, key, now-t0, fmtResult(res[0]), fmtResult(want))
				}
			case 3:
				// Envoy's rate limit op on distinct keys without shadow or
				// zero limits is RL.ALL: the same outcome, per limit.
				lims := decodeAll(in, st.cost)
				got := e.rateLimit(now, lims, 0, nil)
				want := m.all(now, lims)
				same := (got.Err == nil) == (want.Err == nil) && (got.Err == nil || errors.Is(got.Err, want.Err))
				if same && got.Err == nil {
					same = got.Allowed == want.Allowed && got.Time == now && len(got.Each) == len(want.Each)
					for j := 0; same && j < len(got.Each); j++ {
						same = sameResult(got.Each[j], want.Each[j])
					}
				}
				if !same {
					t.Fatalf("step %d: rate limit op %v at t0%+d:\n got  %s\n want %s", i, lims, now-t0, fmtAll(got), fmtAll(want))
				}
			}
			if st.rule.Kind != KindGCRA && st.cost > 0 && in.next()%5 == 0 {
				st.cost = -st.cost // a refund
			}
			got := e.Decide(now, []byte(st.key), st.rule, st.cost)
			want := m.decide(now, st.key, st.rule, st.cost)
			if !sameResult(got, want) {
				t.Fatalf("step %d: %s %v cost %d at t0%+d:\n got  %s\n want %s",
					i, st.key, st.rule, st.cost, now-t0, fmtResult(got), fmtResult(want))
			}
			for _, k := range []string{"a", "b", "c"} {
				ex := e.inspect(now, OpExists, []byte(k)).Count == 1
				if mex := m.live(now, k); ex != mex {
					t.Fatalf("step %d key %s at t0%+d: exists %v, model %v", i, k, now-t0, ex, mex)
				}
				if ttl, mttl := e.inspect(now, OpTTL, []byte(k)).TTL, m.ttl(now, k); ttl != mttl {
					t.Fatalf("step %d key %s at t0%+d: ttl %d, model %d", i, k, now-t0, ttl, mttl)
				}
			}
		}
	})
}
