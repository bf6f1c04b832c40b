package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"testing"
)

// TestInitialIsAbsent: a state back at its initial state vanishes at once
// when an operation leaves it so; calls that leave nothing create nothing.
func TestInitialIsAbsent(t *testing.T) {
	e := newTestEngine()
	k := []byte("k")
	cases := []struct {
		rule  Rule
		after int64 // time after which the state is initial
	}{
		{Rule{KindToken, 3, sec}, sec},
		{Rule{KindLeaky, 3, sec}, sec},
		{Rule{KindFixed, 3, sec}, sec},
		{Rule{KindSliding, 3, sec}, 2 * sec},
		{Rule{KindLog, 3, sec}, sec},
		{Rule{KindGCRA, 3, sec}, sec},
	}
	for _, c := range cases {
		start := align(t0, 10*sec)
		if r := e.Decide(start, k, c.rule, 4); r.Allowed || e.Len() != 0 {
			t.Fatalf("%v: a denied call on an absent key created state", c.rule.Kind)
		}
		e.Decide(start, k, c.rule, 1)
		if e.Len() != 1 {
			t.Fatalf("%v: no state", c.rule.Kind)
		}
		// (CL.THROTTLE's reset_after truncates to the millisecond.)
		if r := e.Decide(start+c.after-1, k, c.rule, 0); e.Len() != 1 || (r.ResetAfter == 0 && c.rule.Kind != KindGCRA) {
			t.Fatalf("%v: gone too early (%+v)", c.rule.Kind, r)
		}
		if r := e.Decide(start+c.after, k, c.rule, 0); e.Len() != 0 || r.ResetAfter != 0 {
			t.Fatalf("%v: peek at reset left state (len %d, %+v)", c.rule.Kind, e.Len(), r)
		}
	}
}

func TestSweep(t *testing.T) {
	e := New(Config{Stripes: 16})
	const n = 2000
	for i := range n {
		r := Rule{KindToken, 10, sec}
		if i%2 == 1 {
			r = Rule{KindFixed, 10, 10 * sec}
		}
		e.Decide(t0, fmt.Appendf(nil, "key-%d", i), r, 2)
	}
	if e.Len() != n {
		t.Fatalf("Len %d", e.Len())
	}
	// At t0+2s the token keys are full again; the window keys are not.
	removed, calls := 0, 0
	for removed < n/2 {
		got := e.Sweep(t0+2*sec, 100)
		if got == 0 && calls > 3*n/100 {
			t.Fatalf("sweep stalled at %d removed", removed)
		}
		removed += got
		calls++
	}
	if removed != n/2 || e.Len() != n/2 {
		t.Fatalf("removed %d, Len %d", removed, e.Len())
	}
	if got := e.Sweep(t0+2*sec, 10*n); got != 0 {
		t.Fatalf("second round removed %d", got)
	}
	if got := e.Sweep(t0+20*sec, 10*n); got != n/2 || e.Len() != 0 {
		t.Fatalf("final round removed %d, Len %d", got, e.Len())
	}
	if e.Sweep(t0, 100) != 0 {
		t.Fatal("sweep of an empty engine")
	}
}

func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMemoryFollowsLiveKeys: memory grows with keys and comes back when they
// are reclaimed, with Sweep or with churn.
func TestMemoryFollowsLiveKeys(t *testing.T) {
	n := 200_000
	if raceEnabled {
		n = 50_000
	}
	base := heapAlloc()
	e := New(Config{})
	r := Rule{KindToken, 5, sec}
	for i := range n {
		e.Decide(t0, fmt.Appendf(nil, "user:%010d", i), r, 1)
	}
	full := heapAlloc()
	perKey := float64(full-base) / float64(n)
	t.Logf("%d keys: %.1f B/key", n, perKey)
	if perKey > 100 {
		t.Errorf("%.1f B/key", perKey)
	}
	// Half the keys are touched again and stay; the rest are reclaimed.
	for i := 0; i < n; i += 2 {
		e.Decide(t0+sec/2, fmt.Appendf(nil, "user:%010d", i), r, 1)
	}
	for e.Sweep(t0+sec, 10000) > 0 {
	}
	if e.Len() != n/2 {
		t.Fatalf("Len %d", e.Len())
	}
	for e.Sweep(t0+2*sec, 10000) > 0 {
	}
	if e.Len() != 0 {
		t.Fatalf("Len %d after all expired", e.Len())
	}
	empty := heapAlloc()
	t.Logf("heap: base %d, full %d, swept %d", base, full, empty)
	if empty > base+(full-base)/20 {
		t.Errorf("reclaimed engine still holds %d bytes of %d", empty-base, full-base)
	}
	runtime.KeepAlive(e)
}

// TestChurnMemoryBounded: keys that come and go at a steady live count keep
// memory bounded (page release, arena compaction, index shrink).
func TestChurnMemoryBounded(t *testing.T) {
	e := New(Config{Stripes: 4})
	r := Rule{KindFixed, 5, sec}
	live := 2000
	rounds := 40
	if raceEnabled {
		rounds = 15
	}
	var peak uint64
	base := heapAlloc()
	for round := range rounds {
		now := t0 + int64(round)*sec
		for i := range live {
			e.Decide(now, fmt.Appendf(nil, "r%d-k%d-%s", round, i, "padding-padding"), r, 1)
		}
		for e.Sweep(now, 100000) > 0 {
		}
		if e.Len() != live {
			t.Fatalf("round %d Len %d", round, e.Len())
		}
		if round == 3 {
			peak = heapAlloc()
		}
	}
	end := heapAlloc()
	t.Logf("base %d, round 3 %d, end %d", base, peak, end)
	if end > base+2*(peak-base)+64<<10 {
		t.Errorf("memory grew with churn: %d then %d", peak-base, end-base)
	}
	for _, s := range e.stripes {
		checkStripe(t, s)
	}
}

// randomOps drives e with random decisions on a few kinds over a few keys.
func randomOps(rng *rand.Rand, now int64, nkeys, steps int) (ops []Op, times []int64) {
	kinds := []Rule{
		{KindToken, 5, 300 * ms}, {KindLeaky, 4, 250 * ms}, {KindFixed, 5, sec},
		{KindSliding, 6, sec}, {KindLog, 5, sec}, {KindGCRA, 4, 200 * ms},
	}
	for range steps {
		i := rng.IntN(nkeys)
		r := kinds[i%len(kinds)]
		if rng.IntN(8) == 0 {
			r.Limit++
		}
		now += rng.Int64N(100 * ms)
		ops = append(ops, Op{Code: OpDecide, Key: fmt.Appendf(nil, "key:%d", i), Rule: r, Cost: rng.Int64N(3)})
		times = append(times, now)
	}
	return ops, times
}

func TestExportImportRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	src := New(Config{Stripes: 8})
	ops, times := randomOps(rng, t0, 60, 3000)
	for i, op := range ops {
		src.Decide(times[i], op.Key, op.Rule, op.Cost)
	}
	now := times[len(times)-1]
	dst := New(Config{Stripes: 2})
	var recs []Record
	for i := range src.NumStripes() {
		recs = append(recs, src.ExportStripe(i, now)...)
	}
	if len(recs) == 0 || len(recs) > src.Len() {
		t.Fatalf("%d records of %d keys", len(recs), src.Len())
	}
	for _, rec := range recs {
		if err := dst.Import(rec); err != nil {
			t.Fatalf("import %q: %v", rec.Key, err)
		}
	}
	sortRecs := func(rs []Record) {
		sort.Slice(rs, func(i, j int) bool { return bytes.Compare(rs[i].Key, rs[j].Key) < 0 })
	}
	var back []Record
	for i := range dst.NumStripes() {
		back = append(back, dst.ExportStripe(i, now)...)
	}
	sortRecs(recs)
	sortRecs(back)
	if fmt.Sprint(recs) != fmt.Sprint(back) {
		t.Fatalf("export after import differs")
	}
	more, mtimes := randomOps(rng, now, 60, 3000)
	for i, op := range more {
		a := src.Decide(mtimes[i], op.Key, op.Rule, op.Cost)
		b := dst.Decide(mtimes[i], op.Key, op.Rule, op.Cost)
		if !sameResult(a, b) {
			t.Fatalf("op %d after restore: %s vs %s", i, fmtResult(a), fmtResult(b))
		}
	}
	// Import replaces a key's state.
	rec := Record{Key: []byte("key:0"), Rule: Rule{KindFixed, 5, sec}, A: align(now, sec), B: 5}
	if err := dst.Import(rec); err != nil {
		t.Fatal(err)
	}
	if r := dst.Decide(now, rec.Key, rec.Rule, 1); r.Allowed || r.Remaining != 0 {
		t.Fatalf("imported full window: %+v", r)
	}
}

func TestImportRejectsGarbage(t *testing.T) {
	e := newTestEngine()
	ws := align(t0, sec)
	bad := []Record{
		{Key: []byte("k"), Rule: Rule{}},
		{Key: []byte("k"), Rule: Rule{Kind: 9, Limit: 1, Period: 1}},
		{Key: []byte("k"), Rule: Rule{KindToken, 0, sec}},
		{Key: []byte("k"), Rule: Rule{KindToken, 5, 0}},
		{Key: []byte("k"), Rule: Rule{KindToken, 5, -1}},
		{Key: []byte("k"), Rule: Rule{KindToken, 1 << 60, sec}},
		{Key: []byte("k"), Rule: Rule{KindToken, 5, 400 * 24 * 3600 * sec}},
		{Key: []byte("k"), Rule: Rule{KindToken, 5, sec}, A: 6},
		{Key: []byte("k"), Rule: Rule{KindToken, 5, sec}, A: -1},
		{Key: []byte("k"), Rule: Rule{KindToken, 5, sec}, A: 1, B: sec},
		{Key: []byte("k"), Rule: Rule{KindToken, 5, sec}, A: 1, B: -1},
		{Key: []byte("k"), Rule: Rule{KindLeaky, 5, sec}, A: 0, B: 1},
		{Key: []byte("k"), Rule: Rule{KindToken, 5, sec}, A: 1, Log: []int64{1}},
		{Key: []byte("k"), Rule: Rule{KindFixed, 5, sec}, A: ws + 1, B: 1},
		{Key: []byte("k"), Rule: Rule{KindFixed, 5, sec}, A: ws, B: -1},
		{Key: []byte("k"), Rule: Rule{KindFixed, 5, sec}, A: ws, B: 1, C: 1},
		{Key: []byte("k"), Rule: Rule{KindSliding, 5, sec}, A: ws, B: 1, C: -1},
		{Key: []byte("k"), Rule: Rule{KindSliding, 5, sec}, A: ws, B: math.MaxInt64},
		{Key: []byte("k"), Rule: Rule{KindLog, 5, sec}, Log: []int64{3, 2}},
		{Key: []byte("k"), Rule: Rule{KindLog, 5, sec}, A: 1, Log: []int64{3}},
		{Key: []byte("k"), Rule: Rule{KindLog, 5000, sec}, Log: []int64{3}},
		{Key: []byte("k"), Rule: Rule{KindLog, 5, sec}, Log: make([]int64, 1001)},
		{Key: []byte("k"), Rule: Rule{KindGCRA, 5, 1 << 60}},
		{Key: []byte("k"), Rule: Rule{KindGCRA, 5, sec}, B: 1},
	}
	for i, rec := range bad {
		if err := e.Import(rec); !errors.Is(err, ErrBadRule) {
			t.Errorf("record %d (%+v) accepted: %v", i, rec, err)
		}
	}
	if e.Len() != 0 {
		t.Fatalf("rejected records left %d keys", e.Len())
	}
	// Random records never panic, and whatever is accepted keeps working.
	rng := rand.New(rand.NewPCG(5, 6))
	words := []int64{0, 1, -1, 2, 5, sec, sec - 1, ws, t0, math.MaxInt64, math.MinInt64, 1 << 53, 1 << 62}
	w := func() int64 { return words[rng.IntN(len(words))] }
	for range 20000 {
		rec := Record{
			Key:  []byte{byte(rng.IntN(8))},
			Rule: Rule{Kind: Kind(rng.IntN(8)), Limit: w(), Period: w()},
			A:    w(), B: w(), C: w(),
		}
		if rng.IntN(3) == 0 {
			rec.Log = []int64{w(), w(), w()}[:rng.IntN(4)]
			slices.Sort(rec.Log)
		}
		if e.Import(rec) == nil {
			for _, n := range []int64{0, 1, 3} {
				e.Decide(t0+w()%sec, rec.Key, rec.Rule, n)
			}
			e.inspect(t0, OpTTL, rec.Key)
			e.ExportStripe(0, t0)
		}
	}
	e.Sweep(t0, 1000)
	for _, s := range e.stripes {
		checkStripe(t, s)
	}
}

// TestScan: every key present for a whole SCAN is returned at least once,
// while other keys come and go; MATCH and TYPE filter; KEYS and FLUSHALL.
func TestScan(t *testing.T) {
	e := New(Config{Stripes: 8})
	stay := map[string]int{}
	for i := range 1500 {
		k := fmt.Sprintf("stay:%d", i)
		r := Rule{KindFixed, 5, min_}
		if i%3 == 0 {
			r = Rule{KindLog, 5, min_}
		}
		e.Decide(t0, []byte(k), r, 1)
		stay[k] = 0
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var cursor uint64
	calls := 0
	for {
		r := e.scan(t0, &Op{Code: OpScan, Cursor: cursor, Count: int64(1 + rng.IntN(40))})
		for _, k := range r.Keys {
			if _, ok := stay[string(k)]; ok {
				stay[string(k)]++
			}
		}
		// Churn: other keys appear and disappear between steps.
		for range 20 {
			k := fmt.Appendf(nil, "churn:%d", rng.IntN(3000))
			if rng.IntN(2) == 0 {
				e.Decide(t0, k, Rule{KindFixed, 5, min_}, 1)
			} else {
				e.delete(t0, k)
			}
		}
		cursor = r.Cursor
		calls++
		if cursor == 0 {
			break
		}
		if calls > 100000 {
			t.Fatal("scan never ended")
		}
	}
	for k, n := range stay {
		if n == 0 {
			t.Fatalf("%s never returned", k)
		}
	}
	// MATCH and TYPE.
	n := 0
	cursor = 0
	for {
		r := e.scan(t0, &Op{Code: OpScan, Cursor: cursor, Count: 100, Pattern: []byte("stay:1?"), Rule: Rule{Kind: KindLog}})
		for _, k := range r.Keys {
			if !globMatch([]byte("stay:1?"), k) {
				t.Fatalf("%s does not match", k)
			}
			n++
		}
		if cursor = r.Cursor; cursor == 0 {
			break
		}
	}
	if n != 3 { // stay:12, stay:15, stay:18
		t.Fatalf("MATCH stay:1? TYPE log returned %d keys", n)
	}
	if got := len(e.keys(t0, []byte("stay:*"))); got != 1500 {
		t.Fatalf("KEYS stay:* returned %d", got)
	}
	// Keys at their initial state are not listed.
	if got := len(e.keys(t0+2*min_, nil)); got != 0 {
		t.Fatalf("KEYS after expiry returned %d", got)
	}
	want := int64(e.Len())
	if got := e.flush(t0); got != want || e.Len() != 0 {
		t.Fatalf("flush counted %d of %d", got, want)
	}
}
