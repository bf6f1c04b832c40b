package engine

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// rlStep is one OpRateLimit call and what it must reply.
type rlStep struct {
	lims    []Limit
	shadow  uint64
	allowed bool
	remain  []int64 // each limit's Remaining
	each    []bool  // each limit's Allowed
}

func fixedLim(key string, limit, cost int64) Limit {
	return Limit{Key: []byte(key), Rule: Rule{Kind: KindFixed, Limit: limit, Period: int64(time.Hour)}, Cost: cost}
}

func TestRateLimitOp(t *testing.T) {
	t0 := int64(1_700_000_000_000_000_000)
	t0 -= t0 % int64(time.Hour) // the start of an hour
	tests := []struct {
		name  string
		steps []rlStep
	}{
		{"all or nothing", []rlStep{
			{lims: []Limit{fixedLim("a", 3, 2), fixedLim("b", 1, 1)}, allowed: true, remain: []int64{1, 0}, each: []bool{true, true}},
			// b is full: nothing is charged, a reports its state as it stands.
			{lims: []Limit{fixedLim("a", 3, 1), fixedLim("b", 1, 1)}, allowed: false, remain: []int64{1, 0}, each: []bool{true, false}},
			{lims: []Limit{fixedLim("a", 3, 1)}, allowed: true, remain: []int64{0}, each: []bool{true}},
		}},
		{"the same key twice is charged twice", []rlStep{
			{lims: []Limit{fixedLim("a", 5, 2), fixedLim("a", 5, 2)}, allowed: true, remain: []int64{3, 1}, each: []bool{true, true}},
			{lims: []Limit{fixedLim("a", 5, 1), fixedLim("a", 5, 1)}, allowed: false, remain: []int64{1, 1}, each: []bool{true, false}},
			{lims: []Limit{fixedLim("a", 5, 1)}, allowed: true, remain: []int64{0}, each: []bool{true}},
		}},
		{"shadow without room is left unchanged, the rest is charged", []rlStep{
			{lims: []Limit{fixedLim("s", 1, 1)}, shadow: 1, allowed: true, remain: []int64{0}, each: []bool{true}},
			{lims: []Limit{fixedLim("e", 2, 1), fixedLim("s", 1, 1)}, shadow: 2, allowed: true, remain: []int64{1, 0}, each: []bool{true, false}},
			{lims: []Limit{fixedLim("e", 2, 1)}, allowed: true, remain: []int64{0}, each: []bool{true}},
			// An enforced denial charges no shadow limit either.
			{lims: []Limit{fixedLim("e", 2, 1), fixedLim("t", 5, 1)}, shadow: 2, allowed: false, remain: []int64{0, 5}, each: []bool{false, true}},
		}},
		{"a zero limit denies and touches nothing", []rlStep{
			{lims: []Limit{fixedLim("z", 0, 1), fixedLim("a", 5, 1)}, allowed: false, remain: []int64{0, 5}, each: []bool{false, true}},
			{lims: []Limit{fixedLim("z", 0, 1), fixedLim("a", 5, 1)}, shadow: 1, allowed: true, remain: []int64{0, 4}, each: []bool{false, true}},
			{lims: []Limit{fixedLim("z", 0, 0)}, allowed: true, remain: []int64{0}, each: []bool{true}},
		}},
		{"refund", []rlStep{
			{lims: []Limit{fixedLim("a", 5, 4)}, allowed: true, remain: []int64{1}, each: []bool{true}},
			{lims: []Limit{fixedLim("a", 5, -3)}, allowed: true, remain: []int64{4}, each: []bool{true}},
			{lims: []Limit{fixedLim("a", 5, 0)}, allowed: true, remain: []int64{4}, each: []bool{true}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine()
			for si, st := range tc.steps {
				res := make([]Result, 1)
				e.Apply(t0, []Op{{Code: OpRateLimit, All: st.lims, Shadow: st.shadow}}, res)
				r := res[0]
				if r.Err != nil {
					t.Fatalf("step %d: %v", si, r.Err)
				}
				if r.Allowed != st.allowed || r.Time != t0 || len(r.Each) != len(st.lims) {
					t.Fatalf("step %d: allowed %t time %d, %d results; want %t", si, r.Allowed, r.Time, len(r.Each), st.allowed)
				}
				for i := range st.lims {
					if r.Each[i].Remaining != st.remain[i] || r.Each[i].Allowed != st.each[i] {
						t.Errorf("step %d limit %d: allowed %t remaining %d, want %t %d", si, i, r.Each[i].Allowed, r.Each[i].Remaining, st.each[i], st.remain[i])
					}
				}
			}
		})
	}
}

func TestRateLimitOpErrors(t *testing.T) {
	e := newTestEngine()
	res := make([]Result, 1)
	e.Apply(1, []Op{{Code: OpDecide, Key: []byte("tok"), Rule: Rule{Kind: KindToken, Limit: 5, Period: 1000}, Cost: 1}}, res)
	// A wrong type anywhere changes nothing anywhere.
	e.Apply(2, []Op{{Code: OpRateLimit, All: []Limit{fixedLim("fresh", 5, 1), fixedLim("tok", 5, 1)}}}, res)
	if !errors.Is(res[0].Err, ErrWrongType) {
		t.Fatalf("error %v, want WRONGTYPE", res[0].Err)
	}
	e.Apply(3, []Op{{Code: OpExists, Key: []byte("fresh")}}, res)
	if res[0].Count != 0 {
		t.Fatal("a failed request created a key")
	}
	e.Apply(4, []Op{{Code: OpRateLimit}}, res)
	if !errors.Is(res[0].Err, ErrBadRule) {
		t.Fatalf("no limits: %v", res[0].Err)
	}
	e.Apply(5, []Op{{Code: OpRateLimit, All: []Limit{{Key: []byte("g"), Rule: Rule{Kind: KindGCRA, Limit: 1, Period: 1}, Cost: 1}}}}, res)
	if !errors.Is(res[0].Err, ErrBadRule) {
		t.Fatalf("gcra: %v", res[0].Err)
	}
}

// TestRateLimitOpKeyLimit: with room for one new key only, a request that
// would create two is refused whole.
func TestRateLimitOpKeyLimit(t *testing.T) {
	e := New(Config{Stripes: 4, MaxLogLimit: 1000, MaxKeys: 1})
	res := make([]Result, 1)
	e.Apply(1, []Op{{Code: OpRateLimit, All: []Limit{fixedLim("a", 5, 1), fixedLim("b", 5, 1)}}}, res)
	if !errors.Is(res[0].Err, ErrKeyLimit) {
		t.Fatalf("error %v, want the key limit", res[0].Err)
	}
	e.Apply(2, []Op{{Code: OpCount}}, res)
	if res[0].Count != 0 {
		t.Fatalf("%d keys after a refused request", res[0].Count)
	}
}

// TestRateLimitOpModel checks OpRateLimit on fixed windows against a
// plain model over random requests: repeated keys, shadow limits, zero
// limits, refunds and peeks, in one window.
func TestRateLimitOpModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(40, 47))
	now := int64(1_700_000_000_000_000_000)
	now -= now % int64(time.Hour)
	keys := []string{"a", "b", "c", "d"}
	limits := map[string]int64{"a": 3, "b": 5, "c": 1, "d": 0}
	for run := 0; run < 200; run++ {
		e := newTestEngine()
		count := map[string]int64{}
		for req := 0; req < 30; req++ {
			n := 1 + rng.IntN(5)
			lims := make([]Limit, n)
			var shadow uint64
			for i := range lims {
				k := keys[rng.IntN(len(keys))]
				lims[i] = fixedLim(k, limits[k], int64(rng.IntN(6))-2)
				if rng.IntN(4) == 0 {
					shadow |= 1 << i
				}
			}
			// The model.
			cum := map[string]int64{}
			allowed := make([]bool, n)
			denied := false
			for i, l := range lims {
				k := string(l.Key)
				if l.Rule.Limit == 0 {
					allowed[i] = l.Cost <= 0
				} else {
					c := cum[k] + l.Cost
					allowed[i] = c <= 0 || count[k]+c <= l.Rule.Limit
					if allowed[i] {
						cum[k] = c
					}
				}
				if !allowed[i] && shadow&(1<<i) == 0 {
					denied = true
				}
			}
			if !denied {
				for k, c := range cum {
					if limits[k] > 0 {
						count[k] = max(0, count[k]+c)
					}
				}
			}
			res := make([]Result, 1)
			e.Apply(now, []Op{{Code: OpRateLimit, All: lims, Shadow: shadow}}, res)
			r := res[0]
			if r.Err != nil {
				t.Fatalf("run %d request %d: %v", run, req, r.Err)
			}
			if r.Allowed != !denied {
				t.Fatalf("run %d request %d %v shadow %b: allowed %t, model %t", run, req, lims, shadow, r.Allowed, !denied)
			}
			for i := range lims {
				if r.Each[i].Allowed != allowed[i] {
					t.Fatalf("run %d request %d limit %d: allowed %t, model %t", run, req, i, r.Each[i].Allowed, allowed[i])
				}
			}
			for _, k := range keys {
				if limits[k] == 0 {
					continue
				}
				e.Apply(now, []Op{{Code: OpDecide, Key: []byte(k), Rule: Rule{Kind: KindFixed, Limit: limits[k], Period: int64(time.Hour)}}}, res)
				if got := limits[k] - res[0].Remaining; got != count[k] {
					t.Fatalf("run %d request %d: key %s counts %d, model %d", run, req, k, got, count[k])
				}
			}
		}
	}
}
