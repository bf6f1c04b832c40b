package engine

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// strStep is one op of a string test and what it must give.
type strStep struct {
	at    int64 // ms after the test's start
	op    Op
	count int64
	kind  Kind
	value string
	err   errcode.Code // 0: none
}

func runStrSteps(t *testing.T, e *Engine, steps []strStep) {
	t.Helper()
	start := align(t0, sec)
	for i, st := range steps {
		var res [1]Result
		e.Apply(start+st.at*1e6, []Op{st.op}, res[:])
		r := res[0]
		if st.err != 0 {
			if c := errcode.Of(r.Err); c == nil || c.Code != st.err {
				t.Fatalf("step %d (%+v): err %v, want code %v", i, st.op, r.Err, st.err)
			}
			continue
		}
		if n := answerNum(st.op.Code, &r); r.Err != nil || n != st.count || r.Kind != st.kind || string(r.Value) != st.value {
			t.Fatalf("step %d (op %d %q): got number %d kind %v value %q err %v, want %d %v %q",
				i, st.op.Code, st.op.Key, n, r.Kind, r.Value, r.Err, st.count, st.kind, st.value)
		}
	}
}

func TestStringOps(t *testing.T) {
	k := []byte("k")
	lim := []byte("lim")
	start := align(t0, sec) / 1e6 // ms
	set := func(v string, flags uint32, exp int64) Op {
		return Op{Code: OpSet, Key: k, Value: []byte(v), Flags: flags, Expire: exp}
	}
	cases := []struct {
		name  string
		steps []strStep
	}{
		{"set get", []strStep{
			{op: Op{Code: OpGet, Key: k}},
			{op: set("v", 0, 0), count: 1},
			{op: Op{Code: OpGet, Key: k}, kind: KindString, value: "v"},
			{op: Op{Code: OpStrlen, Key: k}, count: 1},
			{op: Op{Code: OpTTL, Key: k}, count: -1},
			{op: Op{Code: OpType, Key: k}, kind: KindString},
		}},
		{"nx xx get", []strStep{
			{op: set("a", StrXX, 0)},
			{op: set("a", StrNX, 0), count: 1},
			{op: set("b", StrNX|StrGet, 0), kind: KindString, value: "a"},
			{op: set("c", StrXX|StrGet, 0), count: 1, kind: KindString, value: "a"},
			{op: Op{Code: OpGetDel, Key: k}, kind: KindString, value: "c"},
			{op: Op{Code: OpExists, Key: k}},
		}},
		{"expiry by op time", []strStep{
			{op: set("v", StrExpireRel, 1000), count: 1},
			{at: 999, op: Op{Code: OpExists, Key: k}, count: 1},
			{at: 999, op: Op{Code: OpTTL, Key: k}, count: 1, kind: KindString},
			{at: 1000, op: Op{Code: OpExists, Key: k}},
			{at: 1000, op: Op{Code: OpGet, Key: k}},
		}},
		{"incr keeps ttl", []strStep{
			{op: Op{Code: OpIncrBy, Key: k, Delta: 5}, count: 5},
			{op: Op{Code: OpExpire, Key: k, Flags: StrExpireRel | StrIfNX, Expire: 2000}, count: 1},
			{op: Op{Code: OpExpire, Key: k, Flags: StrExpireRel | StrIfNX, Expire: 9000}},
			{op: Op{Code: OpExpire, Key: k, Flags: StrExpireRel | StrIfGT, Expire: 1000}},
			{op: Op{Code: OpExpire, Key: k, Flags: StrExpireRel | StrIfLT, Expire: 1500}, count: 1},
			{op: Op{Code: OpIncrBy, Key: k, Delta: -7}, count: -2},
			{op: Op{Code: OpExpireTime, Key: k}, count: start + 1500},
			{at: 1499, op: Op{Code: OpGet, Key: k}, kind: KindString, value: "-2"},
			{at: 1500, op: Op{Code: OpIncrBy, Key: k, Delta: 1}, count: 1},
			{at: 1500, op: Op{Code: OpExpireTime, Key: k}, count: -1},
			{at: 1500, op: Op{Code: OpPersist, Key: k}},
		}},
		{"integers", []strStep{
			{op: set("12a", 0, 0), count: 1},
			{op: Op{Code: OpIncrBy, Key: k, Delta: 1}, err: errcode.NotInteger},
			{op: set("007", 0, 0), count: 1},
			{op: Op{Code: OpIncrBy, Key: k, Delta: 1}, err: errcode.NotInteger},
			{op: set(fmt.Sprint(int64(math.MaxInt64)), 0, 0), count: 1},
			{op: Op{Code: OpIncrBy, Key: k, Delta: 1}, err: errcode.IncrOverflow},
			{op: Op{Code: OpIncrBy, Key: k, Delta: -1}, count: math.MaxInt64 - 1},
		}},
		{"limiter keys", []strStep{
			{op: Op{Code: OpDecide, Key: lim, Rule: Rule{KindToken, 5, sec}, Cost: 1}, kind: KindToken},
			{op: Op{Code: OpGet, Key: lim}, kind: KindToken},
			{op: Op{Code: OpIncrBy, Key: lim, Delta: 1}, err: errcode.WrongTypeValue},
			{op: Op{Code: OpExpire, Key: lim, Flags: StrExpireRel, Expire: 10}, err: errcode.WrongType},
			{op: Op{Code: OpSet, Key: lim, Value: []byte("x"), Flags: StrGet}, err: errcode.WrongTypeValue},
			{op: Op{Code: OpSet, Key: lim, Value: []byte("x"), Flags: StrNX}},
			{op: Op{Code: OpSet, Key: lim, Value: []byte("x")}, count: 1},
			{op: Op{Code: OpDecide, Key: lim, Rule: Rule{KindToken, 5, sec}, Cost: 1}, err: errcode.WrongType},
			{op: Op{Code: OpPeek, Key: lim}, err: errcode.WrongType},
		}},
		{"past expiry deletes", []strStep{
			{op: set("v", 0, 0), count: 1},
			{op: Op{Code: OpExpire, Key: k, Flags: StrExpireAbs, Expire: start}, count: 1},
			{op: Op{Code: OpExists, Key: k}},
			{op: set("v", StrExpireAbs, start-1), count: 1},
			{op: Op{Code: OpExists, Key: k}},
			{op: set("v", 0, 0), count: 1},
			{op: Op{Code: OpGetEx, Key: k, Flags: StrExpireRel, Expire: 10}, kind: KindString, value: "v"},
			{op: Op{Code: OpGetEx, Key: k, Flags: StrPersist}, kind: KindString, value: "v"},
			{op: Op{Code: OpTTL, Key: k}, count: -1},
			{op: Op{Code: OpExpire, Key: k, Flags: StrExpireRel, Expire: math.MaxInt64}, err: errcode.BadExpire},
		}},
		{"value too long", []strStep{
			{op: set(string(make([]byte, 513)), 0, 0), err: errcode.ValueTooLong},
			{op: Op{Code: OpExists, Key: k}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runStrSteps(t, New(Config{Stripes: 4}), c.steps)
		})
	}
}

// TestStringExpiryHeap: expired keys are reclaimed by the drain of their
// stripe's heap (no scan), in any order of setting, and the accounting
// goes back to nothing.
func TestStringExpiryHeap(t *testing.T) {
	e := New(Config{Stripes: 1, MaxKeys: 1 << 20})
	start := align(t0, sec)
	const n = 500
	ops := make([]Op, 0, n)
	for i := range n {
		ops = append(ops, Op{Code: OpSet, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("1"),
			Flags: StrExpireRel, Expire: int64((i*7919)%1000 + 1)})
	}
	res := make([]Result, n)
	e.Apply(start, ops, res)
	// Re-expire some, persist others.
	e.Apply(start, []Op{{Code: OpPersist, Key: []byte("k3")}, {Code: OpExpire, Key: []byte("k4"), Flags: StrExpireRel, Expire: 5000}}, res)
	if e.Len() != n {
		t.Fatalf("len %d", e.Len())
	}
	for ms := int64(1); ms <= 3000; ms += 250 {
		var r [1]Result
		e.Apply(start+ms*1e6+sec, []Op{{Code: OpGet, Key: []byte("zz")}}, r[:])
		s := e.stripes[0]
		for i := 1; i < len(s.strs.heap); i++ {
			if s.heapLess(i, (i-1)/2) {
				t.Fatalf("heap order broken at %d", i)
			}
		}
	}
	if e.Len() != 2 {
		t.Fatalf("%d keys left, want k3 and k4", e.Len())
	}
	var r [2]Result
	e.Apply(start+10*sec, []Op{{Code: OpDelete, Key: []byte("k3")}, {Code: OpGet, Key: []byte("zz")}}, r[:])
	if e.Len() != 0 || e.MemoryBytes() != 0 {
		t.Fatalf("len %d, memory %d after all expired", e.Len(), e.MemoryBytes())
	}
}

// TestStringSnapshot: string keys export and import with their values and
// expiries, and the digest sees values.
func TestStringSnapshot(t *testing.T) {
	a := New(Config{Stripes: 4})
	start := align(t0, sec)
	var r [3]Result
	a.Apply(start, []Op{
		{Code: OpSet, Key: []byte("a"), Value: []byte("hello")},
		{Code: OpSet, Key: []byte("b"), Value: []byte("7"), Flags: StrExpireRel, Expire: 5000},
		{Code: OpDecide, Key: []byte("c"), Rule: Rule{KindFixed, 5, sec}, Cost: 1},
	}, r[:])
	b := New(Config{Stripes: 4})
	b.SetClockState(a.ClockState())
	for i := range a.NumStripes() {
		for _, rec := range a.ExportStripe(i, start) {
			if err := b.Import(rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	if da, _ := a.Digest(); func() bool { db, _ := b.Digest(); return da != db }() {
		t.Fatal("digests differ after export and import")
	}
	a.Apply(start, []Op{{Code: OpSet, Key: []byte("a"), Value: []byte("hellO")}}, r[:1])
	if da, _ := a.Digest(); func() bool { db, _ := b.Digest(); return da == db }() {
		t.Fatal("digest does not see the value")
	}
	if err := b.Import(Record{Key: []byte("x"), Rule: Rule{Kind: KindString}, B: 1}); !errors.Is(err, ErrBadRule) {
		t.Fatalf("bad string record: %v", err)
	}
}

// TestStringLimits: string keys count for --max-keys and --maxmemory, with
// their values' bytes; existing keys keep working at the limit, and a key
// that expired stops counting from the next whole second.
func TestStringLimits(t *testing.T) {
	e := New(Config{Stripes: 4, MaxKeys: 2})
	runStrSteps(t, e, []strStep{
		{op: Op{Code: OpSet, Key: []byte("a"), Value: []byte("1"), Flags: StrExpireRel, Expire: 500}, count: 1},
		{op: Op{Code: OpIncrBy, Key: []byte("b"), Delta: 1}, count: 1},
		{op: Op{Code: OpSet, Key: []byte("c"), Value: []byte("1")}, err: errcode.KeyLimit},
		{op: Op{Code: OpIncrBy, Key: []byte("c"), Delta: 1}, err: errcode.KeyLimit},
		{op: Op{Code: OpDecide, Key: []byte("c"), Rule: Rule{KindToken, 5, sec}, Cost: 1}, err: errcode.KeyLimit},
		{op: Op{Code: OpSet, Key: []byte("b"), Value: []byte("replaced")}, count: 1},
		{at: 999, op: Op{Code: OpSet, Key: []byte("c"), Value: []byte("1")}, err: errcode.KeyLimit},
		{at: 1000, op: Op{Code: OpSet, Key: []byte("c"), Value: []byte("1")}, count: 1},
	})
	m := New(Config{Stripes: 1, MaxBytes: 1 << 20})
	var r [1]Result
	m.Apply(t0, []Op{{Code: OpSet, Key: []byte("k"), Value: []byte("v")}}, r[:])
	small := m.MemoryBytes()
	m.Apply(t0, []Op{{Code: OpSet, Key: []byte("k"), Value: make([]byte, 500)}}, r[:])
	if d := m.MemoryBytes() - small; d != 499 {
		t.Fatalf("a value 499 bytes longer accounts %d bytes more", d)
	}
	m.Apply(t0, []Op{{Code: OpDelete, Key: []byte("k")}}, r[:])
	if m.MemoryBytes() != 0 {
		t.Fatalf("%d bytes accounted after the delete", m.MemoryBytes())
	}
}

// BenchmarkStringIncrExpire is envoyproxy/ratelimit's pair, INCRBY then
// EXPIRE, on 1000 keys: no allocation per pair.
func BenchmarkStringIncrExpire(b *testing.B) {
	e := New(Config{})
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "sluice_user_%d_1893456000", i)
	}
	ops := make([]Op, 2)
	res := make([]Result, 2)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := keys[i%len(keys)]
		ops[0] = Op{Code: OpIncrBy, Key: k, Delta: 1}
		ops[1] = Op{Code: OpExpire, Key: k, Flags: StrExpireRel, Expire: 60_000}
		e.Apply(t0+int64(i), ops, res)
	}
}

// TestStringIncrExpireAllocs: once its keys exist, the INCRBY+EXPIRE pair
// allocates nothing.
func TestStringIncrExpireAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations differ under -race")
	}
	e := New(Config{})
	k := []byte("sluice_user_alice_1893456000")
	ops := []Op{{Code: OpIncrBy, Key: k, Delta: 1}, {Code: OpExpire, Key: k, Flags: StrExpireRel, Expire: 60_000}}
	res := make([]Result, 2)
	e.Apply(t0, ops, res)
	if n := testing.AllocsPerRun(100, func() { e.Apply(t0, ops, res) }); n != 0 {
		t.Fatalf("%v allocations per INCRBY+EXPIRE", n)
	}
}
