package engine

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestOpTableComplete: the engine applies exactly the codes that have a
// row in the table of operations (ops.go), probed through Apply for every
// byte, and every row is whole: a name that OpCode.String returns, its
// algorithm, a cluster version, a route and a merge that agree, key
// fields its Op fields carry, at most one field in each shared slot of
// the wire, a known answer. A new OpCode without its row is an op the
// engine refuses, whose own tests fail.
func TestOpTableComplete(t *testing.T) {
	names := map[string]OpCode{}
	rows := 0
	for c := range NumOps {
		code := OpCode(c)
		row := &opRows[c]
		hasRow := row.name != ""
		if applies := opApplies(code); applies != hasRow || code.Known() != hasRow {
			t.Errorf("%v (%d): the engine applies it: %v; Known: %v; it has a row: %v", code, c, applies, code.Known(), hasRow)
		}
		if !hasRow {
			if row.apply != nil || row.since != 0 || row.fields != 0 || row.mutates || row.route != 0 {
				t.Errorf("code %d: a row without a name", c)
			}
			if got, want := code.String(), "OpCode("+strconv.Itoa(c)+")"; got != want {
				t.Errorf("code %d: String() = %q, want %q", c, got, want)
			}
			continue
		}
		rows++
		name := row.name
		if prev, dup := names[name]; dup || !strings.HasPrefix(name, "Op") {
			t.Errorf("code %d: row named %q (also code %d's: %v)", c, name, prev, dup)
		}
		names[name] = code
		if code.String() != name {
			t.Errorf("%s: String() = %q", name, code.String())
		}
		if row.apply == nil {
			t.Errorf("%s: no algorithm", name)
		}
		if row.since < 1 {
			t.Errorf("%s: no cluster version (since)", name)
		}
		if row.route == 0 || row.route > RouteCursor {
			t.Errorf("%s: route %d unset or unknown", name, row.route)
		}
		if row.merge == 0 || row.merge > MergeFirst {
			t.Errorf("%s: merge %d unset or unknown", name, row.merge)
		}
		if (row.route == RouteEvery) != (row.merge != MergeOne) {
			t.Errorf("%s: route %d with merge %d: an op run in every group merges by sum, concatenation or group 0's; any other runs in one group (MergeOne)", name, row.route, row.merge)
		}
		if row.route == RouteKey && row.keys != KeysKey && row.keys != KeysAll {
			t.Errorf("%s: routed by key, but its keys are %d (not Key nor All)", name, row.keys)
		}
		if row.keys == KeysEvery && row.route != RouteEvery {
			t.Errorf("%s: concerns every key but does not run in every group", name)
		}
		if row.keys == KeysKey && row.fields&FieldKey == 0 || row.keys == KeysAll && row.fields&FieldAll == 0 {
			t.Errorf("%s: its keys are %d, but its fields %#x do not carry them", name, row.keys, row.fields)
		}
		if n := popcount(row.fields & CostSlot); n > 1 {
			t.Errorf("%s: names %d fields of the wire's cost slot (Cost, Delta, Count, Clock): at most one travels", name, n)
		}
		if n := popcount(row.fields & CursorSlot); n > 1 {
			t.Errorf("%s: names both Cursor and Shadow, which share the wire's cursor slot", name)
		}
		if row.answer > AnswerTime {
			t.Errorf("%s: answer %d unknown", name, row.answer)
		}
	}
	if rows < 27 {
		t.Fatalf("only %d rows", rows)
	}
}

func popcount(f OpFields) int {
	n := 0
	for ; f != 0; f &= f - 1 {
		n++
	}
	return n
}

// opApplies reports whether the engine applies code (anything but "unknown
// operation code").
func opApplies(code OpCode) bool {
	e := New(Config{Stripes: 1})
	res := make([]Result, 1)
	e.Apply(1e18, []Op{{Code: code}}, res)
	return res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "unknown operation code")
}

// fieldSamples gives every replicated Op field a value an op could carry.
var fieldSamples = []struct {
	bit OpFields
	set func(*Op, string)
}{
	{FieldRule, func(op *Op, key string) {
		switch key {
		case "con":
			op.Rule = Rule{Kind: KindConcurrency, Limit: 2, Period: 1e10}
		case "log":
			op.Rule = Rule{Kind: KindLog, Limit: 5, Period: 1e9}
		default:
			op.Rule = Rule{Kind: KindToken, Limit: 5, Period: 1e9}
		}
	}},
	{FieldCost, func(op *Op, _ string) { op.Cost = 2 }},
	{FieldDelta, func(op *Op, _ string) { op.Delta = 3 }},
	{FieldCount, func(op *Op, _ string) { op.Count = 1 }},
	{FieldClock, func(op *Op, _ string) { op.Clock = 2e9 }},
	{FieldCursor, func(op *Op, _ string) { op.Cursor = 3<<32 | 7 }},
	{FieldShadow, func(op *Op, _ string) { op.Shadow = 3 }},
	{FieldKey, func(op *Op, key string) { op.Key = []byte(key) }},
	{FieldPattern, func(op *Op, _ string) { op.Pattern = []byte("[stl]*") }},
	{FieldToken, func(op *Op, _ string) { op.Token = []byte("t") }},
	{FieldAll, func(op *Op, key string) {
		op.All = []Limit{
			{Key: []byte(key), Rule: Rule{Kind: KindToken, Limit: 5, Period: 1e9}, Cost: 1},
			{Key: []byte("deny"), Rule: Rule{Kind: KindFixed, Limit: 1, Period: 1e9}, Cost: 2},
		}
	}},
	{FieldValue, func(op *Op, _ string) { op.Value = []byte("12") }},
	{FieldExpire, func(op *Op, _ string) { op.Expire = 5000 }},
	{FieldFlags, func(op *Op, _ string) { op.Flags = StrExpireRel }},
	{FieldArgs, func(op *Op, _ string) { op.Args = [][]byte{[]byte("a"), []byte("1")} }},
}

// seeded is an engine holding a token bucket, a string with an expiry, a
// lease and a log, as the op-table tests run ops on.
func seeded(now int64) *Engine {
	e := New(Config{Stripes: 4})
	e.Apply(now, []Op{
		{Code: OpDecide, Key: []byte("tok"), Rule: Rule{Kind: KindToken, Limit: 5, Period: 1e9}, Cost: 1},
		{Code: OpSet, Key: []byte("str"), Value: []byte("7"), Flags: StrExpireRel, Expire: 60_000},
		{Code: OpAcquire, Key: []byte("con"), Rule: Rule{Kind: KindConcurrency, Limit: 2, Period: 1e10}, Cost: 1, Token: []byte("t")},
		{Code: OpDecide, Key: []byte("log"), Rule: Rule{Kind: KindLog, Limit: 5, Period: 1e9}, Cost: 1},
	}, make([]Result, 4))
	return e
}

var seededKeys = []string{"tok", "str", "con", "log", "absent"}

// TestOpRowsNameTheFieldsTheyRead: an op's row names every Op field its
// algorithm reads, so that the wire carries it and cluster does not refuse
// it: for every row, on every kind of key, an op with the fields its row
// names gives the same result and the same state as that op with one more
// field set. A row that forgets a field its algorithm reads fails here.
func TestOpRowsNameTheFieldsTheyRead(t *testing.T) {
	const now = int64(1e18)
	for c := range NumOps {
		code := OpCode(c)
		if !code.Known() {
			continue
		}
		named := code.Fields()
		for _, key := range seededKeys {
			base := Op{Code: code}
			for _, f := range fieldSamples {
				if named&f.bit != 0 {
					f.set(&base, key)
				}
			}
			e := seeded(now)
			want := make([]Result, 1)
			e.Apply(now, []Op{base}, want)
			wantSum, wantN := e.Digest()
			for _, f := range fieldSamples {
				if named&f.bit != 0 {
					continue
				}
				op := base
				f.set(&op, key)
				e := seeded(now)
				got := make([]Result, 1)
				e.Apply(now, []Op{op}, got)
				sum, n := e.Digest()
				if !reflect.DeepEqual(got[0], want[0]) || sum != wantSum || n != wantN {
					t.Errorf("%v on %q: setting a field its row does not name (%#x) changed the outcome:\n got %+v\nwant %+v", code, key, f.bit, got[0], want[0])
				}
			}
		}
	}
}

// TestOpsAnswerInTheirNumber: an op sets none of Result's numbers (Count,
// TTL, Time) but the one its row names, so that the wire, which carries
// that one, loses nothing.
func TestOpsAnswerInTheirNumber(t *testing.T) {
	const now = int64(1e18)
	for c := range NumOps {
		code := OpCode(c)
		if !code.Known() {
			continue
		}
		for _, key := range seededKeys {
			op := Op{Code: code}
			for _, f := range fieldSamples {
				if code.Fields()&f.bit != 0 {
					f.set(&op, key)
				}
			}
			r := make([]Result, 1)
			seeded(now).Apply(now, []Op{op}, r)
			nums := map[Answer]int64{AnswerCount: r[0].Count, AnswerTTL: r[0].TTL, AnswerTime: r[0].Time}
			for a, v := range nums {
				if a != code.Answer() && v != 0 {
					t.Errorf("%v on %q: answers in %d, but number %d is %d", code, key, code.Answer(), a, v)
				}
			}
		}
	}
}

// TestReadsChangeNothing: an op whose row says it does not mutate leaves
// the engine's state (its digest) as it was, on a limiter key, a string
// key, a lease and an absent key.
func TestReadsChangeNothing(t *testing.T) {
	const now = int64(1e18)
	e := seeded(now)
	before, n := e.Digest()
	for c := range NumOps {
		code := OpCode(c)
		if !code.Known() || code.Mutates() {
			continue
		}
		for _, key := range seededKeys {
			r := make([]Result, 1)
			e.Apply(now, []Op{{Code: code, Key: []byte(key), Cost: 1, Pattern: []byte("*")}}, r)
			if after, m := e.Digest(); after != before || m != n {
				t.Errorf("%v on %q changed the state, but its row says it does not mutate", code, key)
				before, n = after, m
			}
		}
	}
}

// TestStray: an op carrying a field its row does not name says which;
// DB goes with every op.
func TestStray(t *testing.T) {
	for _, tt := range []struct {
		op   Op
		want OpFields
	}{
		{Op{Code: OpDecide, Key: []byte("k"), Rule: Rule{Kind: KindToken, Limit: 1, Period: 1}, Cost: 1, DB: 3}, 0},
		{Op{Code: OpIncrBy, Key: []byte("k"), Cost: 1}, FieldCost},
		{Op{Code: OpRateLimit, All: []Limit{{Key: []byte("k")}}, Cursor: 1}, FieldCursor},
		{Op{Code: OpScan, Cursor: 1, Count: 10, Key: []byte("k")}, FieldKey},
		{Op{Code: 250, Key: []byte("k")}, FieldKey},
	} {
		if got := tt.op.Stray(); got != tt.want {
			t.Errorf("%v: Stray() = %#x, want %#x", tt.op.Code, got, tt.want)
		}
	}
}

// answerNum is the number r answers code in (its row's Answer).
func answerNum(code OpCode, r *Result) int64 {
	switch code.Answer() {
	case AnswerTTL:
		return r.TTL
	case AnswerTime:
		return r.Time
	}
	return r.Count
}
