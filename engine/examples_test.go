package engine

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// t0 is an arbitrary instant on a minute boundary (2023-11-14T22:13:00Z).
const t0 = int64(1_699_999_980) * int64(time.Second)

const (
	ms   = int64(time.Millisecond)
	sec  = int64(time.Second)
	min_ = int64(time.Minute)
)

func newTestEngine() *Engine { return New(Config{Stripes: 4, MaxLogLimit: 1000}) }

// call is one Decide with its expected reply (allowed, limit, remaining,
// retry_after, reset_after).
type call struct {
	at   int64 // ns after the example's start
	n    int64
	want [5]int64
}

func reply(r Result) [5]int64 {
	a := int64(0)
	if r.Allowed {
		a = 1
	}
	return [5]int64{a, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter}
}

func TestSpecExamples(t *testing.T) {
	cases := []struct {
		name  string
		start int64
		rule  Rule
		calls []call
	}{
		{
			name: "token 4 4/m: four at one instant, fifth denied 15000",
			rule: Rule{KindToken, 4, 15 * sec}, start: t0 + 7*ms,
			calls: []call{
				{0, 1, [5]int64{1, 4, 3, 0, 15000}},
				{0, 1, [5]int64{1, 4, 2, 0, 30000}},
				{0, 1, [5]int64{1, 4, 1, 0, 45000}},
				{0, 1, [5]int64{1, 4, 0, 0, 60000}},
				{0, 1, [5]int64{0, 4, 0, 15000, 60000}},
				{0, 5, [5]int64{0, 4, 0, -1, 60000}},
				{15*sec - 1, 1, [5]int64{0, 4, 0, 1, 45001}},
				{15 * sec, 1, [5]int64{1, 4, 0, 0, 60000}},
				{15 * sec, 0, [5]int64{1, 4, 0, 0, 60000}},
			},
		},
		{
			name: "leaky 4 4/m mirrors the token bucket as a meter",
			rule: Rule{KindLeaky, 4, 15 * sec}, start: t0,
			calls: []call{
				{0, 4, [5]int64{1, 4, 0, 0, 60000}},
				{0, 1, [5]int64{0, 4, 0, 15000, 60000}},
				{7500 * ms, 1, [5]int64{0, 4, 0, 7500, 52500}},
				{60 * sec, 0, [5]int64{1, 4, 4, 0, 0}},
			},
		},
		{
			name: "log 2 1m at 1:00:01 and 1:00:30 allowed, 1:00:50 denied, 1:01:40 allowed",
			rule: Rule{KindLog, 2, min_}, start: t0,
			calls: []call{
				{1 * sec, 1, [5]int64{1, 2, 1, 0, 60000}},
				{30 * sec, 1, [5]int64{1, 2, 0, 0, 60000}},
				{50 * sec, 1, [5]int64{0, 2, 0, 11000, 40000}},
				{100 * sec, 1, [5]int64{1, 2, 1, 0, 60000}}, // 1:00:30 left at 1:01:30
			},
		},
		{
			name: "sliding 7 1m: 5 previous, 3 current, at 30% one more then denied",
			rule: Rule{KindSliding, 7, min_}, start: t0,
			calls: []call{
				{10 * sec, 5, [5]int64{1, 7, 2, 0, 110000}},
				{60*sec + 1*sec, 3, [5]int64{1, 7, 0, 0, 119000}},
				// at 30%: est = 3 + 5*0.7 = 6.5, floor 6: one more allowed.
				{78 * sec, 1, [5]int64{1, 7, 0, 0, 102000}},
				// est = 4 + 3.5 -> 7: denied until 5*(W-x)/W < 3, x > 40% W.
				{78 * sec, 1, [5]int64{0, 7, 0, 6001, 102000}},
			},
		},
		{
			name: "fixed 5 1m: boundary burst of ten allowed",
			rule: Rule{KindFixed, 5, min_}, start: t0,
			calls: []call{
				{50 * sec, 1, [5]int64{1, 5, 4, 0, 10000}},
				{50 * sec, 1, [5]int64{1, 5, 3, 0, 10000}},
				{50 * sec, 1, [5]int64{1, 5, 2, 0, 10000}},
				{50 * sec, 1, [5]int64{1, 5, 1, 0, 10000}},
				{50 * sec, 1, [5]int64{1, 5, 0, 0, 10000}},
				{50 * sec, 1, [5]int64{0, 5, 0, 10000, 10000}},
				{60*sec + ms, 1, [5]int64{1, 5, 4, 0, 59999}},
				{60*sec + ms, 1, [5]int64{1, 5, 3, 0, 59999}},
				{60*sec + ms, 1, [5]int64{1, 5, 2, 0, 59999}},
				{60*sec + ms, 1, [5]int64{1, 5, 1, 0, 59999}},
				{60*sec + ms, 1, [5]int64{1, 5, 0, 0, 59999}},
			},
		},
		{
			name: "sliding 5 1m: same boundary burst admits one of the second five",
			rule: Rule{KindSliding, 5, min_}, start: t0,
			calls: []call{
				{50 * sec, 5, [5]int64{1, 5, 0, 0, 70000}},
				// est = floor(5 * 59999/60000) = 4: one allowed.
				{60*sec + ms, 1, [5]int64{1, 5, 0, 0, 119999}},
				// 1 + floor(5*(W-x)/W) <= 4 needs x > W/5: 12 s + 1 ns.
				{60*sec + ms, 1, [5]int64{0, 5, 0, 11999 + 1, 119999}},
				{60*sec + ms, 1, [5]int64{0, 5, 0, 12000, 119999}},
				{60*sec + ms, 1, [5]int64{0, 5, 0, 12000, 119999}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine()
			for i, c := range tc.calls {
				r := e.Decide(tc.start+c.at, []byte("k"), tc.rule, c.n)
				if r.Err != nil {
					t.Fatalf("call %d: %v", i, r.Err)
				}
				if got := reply(r); got != c.want {
					t.Errorf("call %d at +%v cost %d: got %v, want %v", i, time.Duration(c.at), c.n, got, c.want)
				}
				if r.Kind != tc.rule.Kind {
					t.Errorf("call %d: kind %v", i, r.Kind)
				}
			}
		})
	}
}

// TestGCRAVectors runs testdata/gcra_vectors.txt.
func TestGCRAVectors(t *testing.T) {
	f, err := os.Open("testdata/gcra_vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e := newTestEngine()
	key := ""
	sc := bufio.NewScanner(f)
	n := 0
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		if k, ok := strings.CutPrefix(text, "key "); ok {
			key = k
			continue
		}
		var at, burst, count, period, qty int64
		var want [5]int64
		if _, err := fmt.Sscanf(text, "%d %d %d %d %d -> %d %d %d %d %d", &at, &burst, &count, &period, &qty,
			&want[0], &want[1], &want[2], &want[3], &want[4]); err != nil {
			t.Fatalf("line %d: %v", line, err)
		}
		rule := Rule{KindGCRA, burst + 1, period * sec / count}
		r := e.Decide(t0+at*ms, []byte(key), rule, qty)
		if r.Err != nil {
			t.Fatalf("line %d: %v", line, r.Err)
		}
		got := reply(r)
		got[0] = 1 - got[0] // limited, not allowed
		if got != want {
			t.Errorf("line %d (%s): got %v, want %v", line, text, got, want)
		}
		n++
	}
	if n < 10 {
		t.Fatalf("only %d vectors", n)
	}
	if exists(e, t0, "peek") {
		t.Error("quantity 0 created a key")
	}
}

func exists(e *Engine, now int64, key string) bool {
	var r [1]Result
	e.Apply(now, []Op{{Code: OpExists, Key: []byte(key)}}, r[:])
	return r[0].Count == 1
}

// apply runs ops through a frozen clock at now.
func applyAt(e *Engine, now int64, ops ...Op) []Result {
	res := make([]Result, len(ops))
	e.SetClockState(ClockState{Frozen: true, FrozenAt: now, Last: now})
	e.Apply(0, ops, res)
	return res
}

func TestStateOps(t *testing.T) {
	e := newTestEngine()
	tok := Rule{KindToken, 10, sec}
	k := []byte("k")
	r := applyAt(e, t0,
		Op{Code: OpPeek, Key: k},
		Op{Code: OpDecide, Key: k, Rule: tok, Cost: 0},
		Op{Code: OpExists, Key: k},
		Op{Code: OpDecide, Key: k, Rule: tok, Cost: 3},
		Op{Code: OpExists, Key: k},
		Op{Code: OpType, Key: k},
		Op{Code: OpTTL, Key: k},
		Op{Code: OpPeek, Key: k},
		Op{Code: OpDecide, Key: k, Rule: Rule{KindFixed, 10, sec}, Cost: 1},
		Op{Code: OpDecide, Key: k, Rule: Rule{KindFixed, 10, sec}, Cost: 0},
		Op{Code: OpCount},
		Op{Code: OpTTL, Key: []byte("nope")},
		Op{Code: OpType, Key: []byte("nope")},
		Op{Code: OpDelete, Key: k},
		Op{Code: OpDelete, Key: k},
		Op{Code: OpCount},
		Op{Code: OpDecide, Key: k, Rule: Rule{KindLog, 1001, sec}, Cost: 1},
		Op{Code: OpDecide, Key: k, Rule: Rule{KindToken, 0, sec}, Cost: 1},
		Op{Code: OpDecide, Key: k, Rule: tok, Cost: -1},
		Op{Code: OpCode(99)},
		Op{Code: OpDecide, Key: k, Rule: Rule{KindGCRA, 16, 2 * sec}, Cost: -1},
	)
	check := func(i int, cond bool, what string) {
		t.Helper()
		if !cond {
			t.Errorf("op %d: %s: %+v", i, what, r[i])
		}
	}
	check(0, r[0].Kind == KindNone && r[0].Err == nil, "peek of absent key is nil")
	check(1, r[1].Allowed && r[1].Remaining == 10, "cost 0 on a new key")
	check(2, r[2].Count == 0, "cost 0 created nothing")
	check(3, r[3].Allowed && r[3].Remaining == 7 && r[3].ResetAfter == 3000, "cost 3")
	check(4, r[4].Count == 1, "exists")
	check(5, r[5].Kind == KindToken, "type token")
	check(6, r[6].TTL == 3*sec, "ttl 3 s")
	check(7, r[7].Kind == KindToken && r[7].Remaining == 7 && r[7].Limit == 10, "peek")
	check(8, errors.Is(r[8].Err, ErrWrongType), "wrongtype")
	check(9, errors.Is(r[9].Err, ErrWrongType), "wrongtype on a peek")
	check(10, r[10].Count == 1, "count")
	check(11, r[11].TTL == -2, "ttl absent")
	check(12, r[12].Kind == KindNone, "type absent")
	check(13, r[13].Count == 1, "delete")
	check(14, r[14].Count == 0, "delete again")
	check(15, r[15].Count == 0, "count after delete")
	check(16, errors.Is(r[16].Err, ErrBadRule), "log above max-log-limit")
	check(17, errors.Is(r[17].Err, ErrBadRule), "limit 0")
	check(18, r[18].Err == nil && r[18].Allowed && r[18].Remaining == 10 && r[18].ResetAfter == 0, "a refund on an absent key")
	check(19, errors.Is(r[19].Err, ErrBadRule), "unknown op")
	check(20, errors.Is(r[20].Err, ErrBadRule), "negative quantity on a gcra key")
}

// TestCountIsExact: DBSIZE does not count keys back at their initial state,
// even before they are reclaimed.
func TestCountIsExact(t *testing.T) {
	e := newTestEngine()
	e.Decide(t0, []byte("a"), Rule{KindToken, 10, sec}, 3)
	e.Decide(t0, []byte("b"), Rule{KindFixed, 10, min_}, 3)
	if r := applyAt(e, t0+3*sec, Op{Code: OpCount}); r[0].Count != 1 || e.Len() != 2 {
		t.Fatalf("count %d, Len %d", r[0].Count, e.Len())
	}
	// Another kind may take a key back at its initial state.
	if r := e.Decide(t0+3*sec, []byte("a"), Rule{KindLog, 1, sec}, 1); r.Err != nil || !r.Allowed {
		t.Fatalf("log on a dead token key: %+v", r)
	}
	if r := e.Decide(t0+3*sec, []byte("b"), Rule{KindLog, 1, sec}, 0); !errors.Is(r.Err, ErrWrongType) {
		t.Fatalf("log on a live fixed key: %+v", r)
	}
}

func TestClockOps(t *testing.T) {
	e := newTestEngine()
	wall := t0
	do := func(ops ...Op) []Result {
		res := make([]Result, len(ops))
		e.Apply(wall, ops, res)
		return res
	}
	if r := do(Op{Code: OpTime}); r[0].Time != wall {
		t.Fatalf("time %d, want wall %d", r[0].Time, wall)
	}
	r := do(Op{Code: OpTimeWarp, Clock: 5 * sec}, Op{Code: OpTime})
	if r[0].Err != nil || r[1].Time != wall+5*sec {
		t.Fatalf("timewarp: %+v", r)
	}
	// Freeze at the current time, then wall time moves but the clock does not.
	r = do(Op{Code: OpClockFreeze}, Op{Code: OpTime})
	if r[0].Err != nil || r[1].Time != wall+5*sec {
		t.Fatalf("freeze: %+v", r)
	}
	wall += 10 * sec
	if r := do(Op{Code: OpTime}); r[0].Time != t0+5*sec {
		t.Fatalf("frozen clock moved: %d", r[0].Time-t0)
	}
	if got := e.Now(wall); got != t0+5*sec {
		t.Fatalf("Now on a frozen clock: %d", got-t0)
	}
	r = do(Op{Code: OpClockFreeze, Clock: t0}, Op{Code: OpTimeWarp, Clock: sec}, Op{Code: OpTime})
	if !errors.Is(r[0].Err, ErrClockBackwards) || r[2].Time != t0+6*sec {
		t.Fatalf("freeze backwards / warp while frozen: %+v", r)
	}
	r = do(Op{Code: OpClockFreeze, Clock: t0 + 100*sec}, Op{Code: OpTime})
	if r[0].Err != nil || r[1].Time != t0+100*sec {
		t.Fatalf("freeze forward: %+v", r)
	}
	// Resume continues from the frozen instant.
	r = do(Op{Code: OpClockResume}, Op{Code: OpTime})
	if r[1].Time != t0+100*sec {
		t.Fatalf("resume: %d", r[1].Time-t0)
	}
	wall += sec
	if r := do(Op{Code: OpTime}); r[0].Time != t0+101*sec {
		t.Fatalf("after resume: %d", r[0].Time-t0)
	}
	// Time never goes backwards, even when wall time does.
	if r := do(Op{Code: OpTime}); r[0].Time != t0+101*sec {
		t.Fatal("moved")
	}
	if r := do(Op{Code: OpTimeWarp, Clock: -1}); !errors.Is(r[0].Err, ErrBadRule) {
		t.Fatal("negative warp accepted")
	}
	cs := e.ClockState()
	e2 := newTestEngine()
	e2.SetClockState(cs)
	if e2.ClockState() != cs {
		t.Fatal("clock state round trip")
	}
	wall -= 50 * sec
	if got, r := e.Now(wall), do(Op{Code: OpTime}); got != t0+101*sec || r[0].Time != got {
		t.Fatalf("backwards wall: Now %d TIME %d", got-t0, r[0].Time-t0)
	}
	// Ops after a clock op in the same batch see the new time.
	r = do(Op{Code: OpDecide, Key: []byte("k"), Rule: Rule{KindFixed, 1, min_}, Cost: 1},
		Op{Code: OpTimeWarp, Clock: min_},
		Op{Code: OpDecide, Key: []byte("k"), Rule: Rule{KindFixed, 1, min_}, Cost: 1})
	if !r[0].Allowed || !r[2].Allowed {
		t.Fatalf("warp inside a batch: %+v", r)
	}
}

// TestRuleChanges checks the rule-change semantics (docs/commands.md,
// "Changing a key's parameters") on each kind.
func TestRuleChanges(t *testing.T) {
	e := newTestEngine()
	k := []byte("k")
	// Token: tokens = min(tokens, capacity).
	e.Decide(t0, k, Rule{KindToken, 10, sec}, 4) // 6 tokens
	if r := e.Decide(t0, k, Rule{KindToken, 5, sec}, 0); r.Remaining != 5 {
		t.Errorf("token lowered capacity peek: %+v", r)
	}
	if r := e.Decide(t0, k, Rule{KindToken, 20, sec}, 1); r.Remaining != 5 || r.ResetAfter != 15000 {
		t.Errorf("token raised capacity keeps tokens: %+v", r)
	}
	// Period change keeps the fractional level in the new interval's ns.
	e.Decide(t0, []byte("p"), Rule{KindToken, 2, 10 * sec}, 2)
	if r := e.Decide(t0+5*sec, []byte("p"), Rule{KindToken, 2, 20 * sec}, 0); r.Remaining != 0 || r.ResetAfter != 30000 {
		t.Errorf("token interval change: %+v", r)
	}
	// Leaky: level = min(level, capacity).
	e.Decide(t0, []byte("l"), Rule{KindLeaky, 10, sec}, 8)
	if r := e.Decide(t0, []byte("l"), Rule{KindLeaky, 5, sec}, 1); r.Allowed || r.Remaining != 0 || r.RetryAfter != 1000 {
		t.Errorf("leaky lowered: %+v", r)
	}
	// Fixed: count kept; a lower limit denies.
	e.Decide(t0, []byte("f"), Rule{KindFixed, 10, min_}, 8)
	// t0 is an odd minute: its 2-minute window ends at t0+60s.
	if r := e.Decide(t0+sec, []byte("f"), Rule{KindFixed, 5, 2 * min_}, 1); r.Allowed || r.Remaining != 0 || r.RetryAfter != 59000 {
		t.Errorf("fixed lowered: %+v", r)
	}
	// Log: timestamps kept, judged by the new window.
	e.Decide(t0, []byte("g"), Rule{KindLog, 3, min_}, 3)
	if r := e.Decide(t0+30*sec, []byte("g"), Rule{KindLog, 3, 10 * sec}, 1); !r.Allowed || r.Remaining != 2 {
		t.Errorf("log shorter window: %+v", r)
	}
}
