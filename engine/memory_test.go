package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// recount recomputes a stripe's accounted bytes from scratch, walking its
// keys: what account() must always agree with.
func recount(e *Engine) (keys, bytes int64) {
	for _, s := range e.stripes {
		s.mu.Lock()
		rules := map[Rule]bool{}
		s.walk(0, int(s.slotsEnd())+1, func(_ uint32, ent *entry) {
			keys++
			r := s.rules.get(ent.rule)
			rules[r] = true
			bytes += entryCost
			if k := s.keyOf(ent); len(k) > inlineKey {
				bytes += int64(len(k) + uvarintLen(uint64(len(k))))
			}
			if r.Kind == KindLog {
				bytes += ringCost + tsCost*int64(s.logs.rings[ent.a].n)
			}
		})
		bytes += int64(len(rules)) * ruleCost
		s.mu.Unlock()
	}
	return keys, bytes
}

func checkAccounting(t *testing.T, e *Engine, when string) {
	t.Helper()
	keys, bytes := recount(e)
	if got := e.MemoryBytes(); got != bytes {
		t.Fatalf("%s: MemoryBytes %d, recounted %d", when, got, bytes)
	}
	if int64(e.Len()) != keys {
		t.Fatalf("%s: Len %d, recounted %d", when, e.Len(), keys)
	}
	if e.tot != nil && (e.tot.keys.Load() != keys || e.tot.bytes.Load() != bytes) {
		t.Fatalf("%s: totals %d keys %d bytes, recounted %d, %d", when, e.tot.keys.Load(), e.tot.bytes.Load(), keys, bytes)
	}
}

func TestMaxKeys(t *testing.T) {
	e := New(Config{Stripes: 4, MaxKeys: 10})
	rule := Rule{KindToken, 5, sec} // a taken token comes back in 1 s
	key := func(i int) []byte { return fmt.Appendf(nil, "k%d", i) }
	for i := range 10 {
		if r := e.Decide(t0, key(i), rule, 1); r.Err != nil || !r.Allowed {
			t.Fatalf("key %d: %+v", i, r)
		}
	}
	r := e.Decide(t0, key(10), rule, 1)
	if !errors.Is(r.Err, ErrKeyLimit) || errcode.Of(r.Err).Num != 10 { // the reply names max-keys 10 (resp's table)
		t.Fatalf("11th key: %+v", r)
	}
	if e.Len() != 10 {
		t.Fatalf("a refused key was created: %d keys", e.Len())
	}
	// Existing keys keep working: allowed, denied, peeked.
	for range 4 {
		if r := e.Decide(t0, key(0), rule, 1); r.Err != nil || !r.Allowed {
			t.Fatalf("existing key: %+v", r)
		}
	}
	if r := e.Decide(t0, key(0), rule, 1); r.Err != nil || r.Allowed {
		t.Fatalf("existing key, empty bucket: %+v", r)
	}
	res := applyAt(e, t0, Op{Code: OpPeek, Key: key(1)}, Op{Code: OpPeek, Key: key(10)})
	if res[0].Err != nil || res[0].Remaining != 4 || res[1].Err != nil || res[1].Kind != KindNone {
		t.Fatalf("peeks: %+v", res)
	}
	// Calls that create nothing never fail: a peek (COST 0) and a denied
	// call on an absent key.
	if r := e.Decide(t0, key(10), rule, 0); r.Err != nil || !r.Allowed {
		t.Fatalf("COST 0 on an absent key: %+v", r)
	}
	if r := e.Decide(t0, key(10), rule, 6); r.Err != nil || r.Allowed || r.RetryAfter != -1 {
		t.Fatalf("denied call on an absent key: %+v", r)
	}
	// A delete makes room.
	if res := applyAt(e, t0, Op{Code: OpDelete, Key: key(1)}); res[0].Count != 1 {
		t.Fatal("delete")
	}
	if r := e.Decide(t0, key(10), rule, 1); r.Err != nil {
		t.Fatalf("after a delete: %+v", r)
	}
	if r := e.Decide(t0, key(11), rule, 1); !errors.Is(r.Err, ErrKeyLimit) {
		t.Fatalf("full again: %+v", r)
	}
	checkAccounting(t, e, "full")
	// Keys back at their initial state make room, though nothing reclaimed
	// them yet: every key but k0 (empty bucket, 5 s to refill) is full
	// again after 1 s.
	if r := e.Decide(t0+sec, key(11), rule, 1); r.Err != nil || !r.Allowed {
		t.Fatalf("after the others refilled: %+v", r)
	}
	if e.Len() != 2 {
		t.Fatalf("%d keys after reclaiming, want 2 (k0, k11)", e.Len())
	}
	checkAccounting(t, e, "after reclaim")
}

func TestMaxBytes(t *testing.T) {
	// Room for three short keys (56 B each, one rule of 80 B: 248 B).
	e := New(Config{Stripes: 1, MaxBytes: 250})
	rule := Rule{KindFixed, 10, min_}
	for i := range 3 {
		if r := e.Decide(t0, fmt.Appendf(nil, "k%d", i), rule, 1); r.Err != nil {
			t.Fatalf("key %d: %+v", i, r)
		}
	}
	if got := e.MemoryBytes(); got != 3*entryCost+ruleCost {
		t.Fatalf("MemoryBytes %d", got)
	}
	r := e.Decide(t0, []byte("k3"), rule, 1)
	if r.Err != ErrOOM {
		t.Fatalf("4th key: %+v", r)
	}
	if r := e.Decide(t0, []byte("k0"), rule, 9); r.Err != nil || !r.Allowed {
		t.Fatalf("existing key: %+v", r)
	}
	// A long key costs its bytes too.
	e = New(Config{Stripes: 1, MaxBytes: 56 + 80 + 56 + 40})
	if r := e.Decide(t0, []byte("short"), rule, 1); r.Err != nil {
		t.Fatal(r.Err)
	}
	long := make([]byte, 40)
	if r := e.Decide(t0, long, rule, 1); !errors.Is(r.Err, ErrOOM) {
		t.Fatalf("a 40-byte key in 40 bytes left: %+v", r)
	}
	if r := e.Decide(t0, long[:39], rule, 1); r.Err != nil {
		t.Fatalf("a 39-byte key (+1 length byte) in 40 bytes left: %+v", r)
	}
	// Log timestamps count, and their expiry makes room.
	e = New(Config{Stripes: 1, MaxBytes: 56 + 80 + 40 + 8*10 + 56 + 40 + 8})
	logRule := Rule{KindLog, 20, sec}
	for i := range 10 {
		if r := e.Decide(t0+int64(i)*100*ms, []byte("log"), logRule, 1); r.Err != nil || !r.Allowed {
			t.Fatalf("log entry %d: %+v", i, r)
		}
	}
	if r := e.Decide(t0+sec/2, []byte("log"), logRule, 1); r.Err != nil || !r.Allowed {
		t.Fatalf("an existing log grows past the limit: %+v", r)
	}
	if r := e.Decide(t0+sec/2, []byte("log2"), logRule, 1); !errors.Is(r.Err, ErrOOM) {
		t.Fatalf("a new log with 11 timestamps held: %+v", r)
	}
	// At t0+1.15s the limits count from the whole second t0+1s, when the
	// timestamp t0 had expired: ten remain, and log2 fits exactly.
	if r := e.Decide(t0+sec+150*ms, []byte("log2"), logRule, 1); r.Err != nil {
		t.Fatalf("after expiry: %+v", r)
	}
	checkAccounting(t, e, "logs")
}

// TestLimitsDeterministic: replicas that apply the same operations refuse
// the same creations, whatever each reclaims on its own (Sweep) or was
// restored from (a snapshot export).
func TestLimitsDeterministic(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { limitsDeterministic(t, seed) })
	}
}

func limitsDeterministic(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	maxStep := []int64{3 * ms, 30 * ms, 300 * ms, 3 * ms}[seed%4]
	cfg := Config{Stripes: 8, MaxLogLimit: 100, MaxKeys: 40, MaxBytes: 4000}
	if maxStep == 300*ms {
		cfg.MaxKeys, cfg.MaxBytes = 4, 900
	}
	a, b, c := New(cfg), New(cfg), New(cfg)
	rules := []Rule{
		{KindToken, 3, 50 * ms}, {KindLeaky, 2, 80 * ms}, {KindFixed, 3, 100 * ms},
		{KindSliding, 4, 70 * ms}, {KindLog, 5, 90 * ms}, {KindGCRA, 2, 60 * ms},
		{KindLog, 3, 1500 * ms}, {KindToken, 2, 700 * ms}, {KindSliding, 3, 2 * sec},
	}
	now := t0 + rng.Int64N(sec)
	ooms := 0
	for step := range 6000 {
		now += rng.Int64N(maxStep)
		key := fmt.Appendf(nil, "key-%d", rng.IntN(120))
		if rng.IntN(3) == 0 {
			key = fmt.Appendf(key, "-with-a-long-suffix-%d", rng.IntN(3))
		}
		var op Op
		switch rng.IntN(20) {
		case 0:
			op = Op{Code: OpDelete, Key: key}
		case 1:
			op = Op{Code: OpPeek, Key: key}
		default:
			op = Op{Code: OpDecide, Key: key, Rule: rules[rng.IntN(len(rules))], Cost: rng.Int64N(3)}
		}
		var out [3]Result
		for i, e := range []*Engine{a, b, c} {
			r := make([]Result, 1)
			e.SetClockState(ClockState{Frozen: true, FrozenAt: now, Last: now})
			e.Apply(0, []Op{op}, r)
			out[i] = r[0]
		}
		if errors.Is(out[0].Err, ErrOOM) || errors.Is(out[0].Err, ErrKeyLimit) {
			ooms++
		}
		for i := 1; i < 3; i++ {
			if fmt.Sprint(out[i]) != fmt.Sprint(out[0]) {
				t.Fatalf("step %d, %q: replica %d replied %+v, replica 0 %+v", step, key, i, out[i], out[0])
			}
		}
		// b reclaims on its own schedule; c is rebuilt from a snapshot.
		if rng.IntN(4) != 0 {
			b.Sweep(now-rng.Int64N(maxStep), rng.IntN(256)+1)
		}
		if rng.IntN(200) == 0 {
			var recs []Record
			for i := range c.NumStripes() {
				recs = append(recs, c.ExportStripe(i, now)...)
			}
			cs := c.ClockState()
			c = New(cfg)
			c.SetClockState(cs)
			for _, rec := range recs {
				if err := c.Import(rec); err != nil {
					t.Fatal(err)
				}
			}
		}
		if step%997 == 0 {
			checkAccounting(t, a, fmt.Sprint("step ", step))
			checkAccounting(t, b, fmt.Sprint("step ", step))
			checkAccounting(t, c, fmt.Sprint("step ", step))
		}
	}
	t.Logf("%d refusals", ooms)
	if ooms < 100 {
		t.Fatalf("only %d refusals: the test does not reach the limits", ooms)
	}
}

// TestAccountingFollowsKeys: the accounting returns to zero when the keys
// go, by delete, expiry and sweep, or flush.
func TestAccountingFollowsKeys(t *testing.T) {
	e := New(Config{Stripes: 4})
	for i := range 300 {
		k := fmt.Appendf(nil, "key-%d-%s", i, "some-long-suffix-making-it-an-arena-key"[:i%40])
		e.Decide(t0, k, Rule{Kind([]Kind{KindToken, KindLog, KindSliding}[i%3]), 5, sec}, 2)
	}
	checkAccounting(t, e, "filled")
	if e.MemoryBytes() == 0 {
		t.Fatal("no memory accounted")
	}
	e.Sweep(t0+3*sec, 1<<20)
	if e.Len() != 0 || e.MemoryBytes() != 0 {
		t.Fatalf("after sweeping: %d keys, %d bytes", e.Len(), e.MemoryBytes())
	}
	e.Decide(t0, []byte("x"), Rule{KindToken, 5, sec}, 1)
	applyAt(e, t0, Op{Code: OpFlush})
	if e.MemoryBytes() != 0 {
		t.Fatalf("after FLUSHALL: %d bytes", e.MemoryBytes())
	}
}

// TestReviveIsCreation: a key back at its initial state but not reclaimed
// yet is absent: using it again is a creation, refused when full, as on a
// replica that had reclaimed it.
func TestReviveIsCreation(t *testing.T) {
	cfg := Config{Stripes: 1, MaxBytes: 330}
	a, b := New(cfg), New(cfg)
	bucket, logRule := Rule{KindToken, 5, sec}, Rule{KindLog, 30, 10 * sec}
	for _, e := range []*Engine{a, b} {
		e.Decide(t0, []byte("d"), bucket, 1) // back at its initial state at t0+1s
		for i := range 20 {                  // the log grows past the limit: allowed
			if r := e.Decide(t0+int64(i)*ms, []byte("log"), logRule, 1); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	b.Sweep(t0+2*sec, 100)
	if a.Len() != 2 || b.Len() != 1 {
		t.Fatalf("held keys: %d and %d", a.Len(), b.Len())
	}
	for _, e := range []*Engine{a, b} {
		if r := e.Decide(t0+2*sec, []byte("d"), bucket, 1); !errors.Is(r.Err, ErrOOM) {
			t.Fatalf("reviving a dead key on a full engine: %+v", r)
		}
	}
	logRule.Period = 5 * sec
	for _, e := range []*Engine{a, b} {
		if r := e.Decide(t0+2*sec, []byte("log"), logRule, 1); r.Err != nil || !r.Allowed {
			t.Fatalf("an existing key with a new rule: %+v", r)
		}
	}
}

// TestLimitsAllAndLeases: under a key limit, an RL.ALL that would create
// more keys than fit is refused whole, and a new concurrency key is
// refused while existing ones keep deciding.
func TestLimitsAllAndLeases(t *testing.T) {
	e := New(Config{Stripes: 4, MaxKeys: 3, MaxLogLimit: 1000})
	r := Rule{KindFixed, 5, min_}
	at := func(op Op) Result {
		res := make([]Result, 1)
		e.Apply(t0, []Op{op}, res)
		return res[0]
	}
	if res := at(Op{Code: OpDecide, Key: []byte("a"), Rule: r, Cost: 1}); !res.Allowed {
		t.Fatal(fmtResult(res))
	}
	all := Op{Code: OpAll, All: []Limit{{Key: []byte("a"), Rule: r, Cost: 1}, {Key: []byte("b"), Rule: r, Cost: 1}, {Key: []byte("c"), Rule: r, Cost: 1}, {Key: []byte("d"), Rule: r, Cost: 1}}}
	if res := at(all); !errors.Is(res.Err, ErrKeyLimit) {
		t.Fatalf("RL.ALL creating 3 keys with room for 2: %s", fmtResult(res))
	}
	if n := at(Op{Code: OpCount}).Count; n != 1 {
		t.Fatalf("%d keys after a refused RL.ALL, want 1", n)
	}
	if p := e.peek(t0, []byte("a")); p.Remaining != 4 {
		t.Fatalf("a charged by a refused RL.ALL: %s", fmtResult(p))
	}
	all.All = all.All[:3]
	if res := at(all); res.Err != nil || !res.Allowed {
		t.Fatalf("RL.ALL creating 2 keys with room for 2: %s", fmtResult(res))
	}
	lease := Op{Code: OpAcquire, Key: []byte("c2"), Rule: Rule{KindConcurrency, 2, min_}, Cost: 1, Token: []byte("x")}
	if res := at(lease); !errors.Is(res.Err, ErrKeyLimit) {
		t.Fatalf("a new lease key beyond max-keys: %s", fmtResult(res))
	}
	if e.MemoryBytes() <= 0 {
		t.Fatal("no memory accounted")
	}
	e2 := New(Config{Stripes: 4, MaxKeys: 1, MaxLogLimit: 1000})
	res := make([]Result, 1)
	e2.Apply(t0, []Op{lease}, res)
	before := e2.MemoryBytes()
	lease.Token = []byte("y")
	e2.Apply(t0, []Op{lease}, res)
	if !res[0].Allowed || e2.MemoryBytes() != before+leaseCost+1 {
		t.Fatalf("a second lease on an existing key: %s, memory %d -> %d", fmtResult(res[0]), before, e2.MemoryBytes())
	}
	e2.Apply(t0, []Op{{Code: OpRelease, Key: lease.Key, Token: []byte("x")}, {Code: OpRelease, Key: lease.Key, Token: []byte("y")}}, make([]Result, 2))
	if e2.MemoryBytes() != 0 {
		t.Fatalf("memory after the last lease went: %d", e2.MemoryBytes())
	}
}
