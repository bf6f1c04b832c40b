package engine

import (
	"slices"
	"sync"
	"testing"
)

// recorder is a Watcher that records what it is told.
type recorder struct {
	mu   sync.Mutex
	keys []string
	all  int
}

func (r *recorder) KeyChanged(key []byte) {
	r.mu.Lock()
	r.keys = append(r.keys, string(key))
	r.mu.Unlock()
}

func (r *recorder) AllChanged() {
	r.mu.Lock()
	r.all++
	r.mu.Unlock()
}

// take returns the distinct keys and AllChanged calls recorded since the
// last take.
func (r *recorder) take() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := slices.Compact(slices.Sorted(slices.Values(r.keys)))
	all := r.all
	r.keys, r.all = nil, 0
	return keys, all
}

// TestWatcher: the watcher hears of every change of a key's state (a
// decision, a refund, a delete, a reclaim by an access or by Sweep,
// FLUSHALL, Reset) and of nothing on reads or decisions at cost 0.
func TestWatcher(t *testing.T) {
	rec := &recorder{}
	e := New(Config{Stripes: 4, Watcher: rec})
	fixed := Rule{KindFixed, 5, min_}
	decide := func(key string, cost int64) Op { return Op{Code: OpDecide, Key: []byte(key), Rule: fixed, Cost: cost} }
	key := func(code OpCode, k string) Op { return Op{Code: code, Key: []byte(k)} }
	tests := []struct {
		name string
		at   int64
		ops  []Op
		keys []string
		all  int
	}{
		{"decisions, one per key", t0, []Op{decide("a", 1), decide("b", 2), decide("a", 1)}, []string{"a", "b"}, 0},
		{"a refund", t0, []Op{decide("a", -1)}, []string{"a"}, 0},
		{"a denied decision", t0, []Op{decide("b", 10)}, []string{"b"}, 0},
		{"reads", t0, []Op{key(OpPeek, "a"), key(OpExists, "a"), key(OpType, "a"), key(OpTTL, "a"), {Code: OpCount}, {Code: OpKeys}, {Code: OpScan}}, nil, 0},
		{"cost 0 on a live key", t0, []Op{decide("a", 0)}, nil, 0},
		{"a delete", t0, []Op{key(OpDelete, "b")}, []string{"b"}, 0},
		{"a reclaim by peek at the initial state", t0 + 2*min_, []Op{key(OpPeek, "a")}, []string{"a"}, 0},
		{"flushall", t0 + 2*min_, []Op{decide("c", 1), {Code: OpFlush}}, []string{"c"}, 1},
	}
	for _, tc := range tests {
		e.Apply(tc.at, tc.ops, make([]Result, len(tc.ops)))
		keys, all := rec.take()
		if !slices.Equal(keys, tc.keys) || all != tc.all {
			t.Fatalf("%s: told of %q and %d flushes, want %q and %d", tc.name, keys, all, tc.keys, tc.all)
		}
	}
	// Sweep's reclaim.
	e.Decide(t0+3*min_, []byte("d"), fixed, 1)
	rec.take()
	if n := e.Sweep(t0+5*min_, 100); n != 1 {
		t.Fatalf("Sweep removed %d", n)
	}
	if keys, _ := rec.take(); !slices.Equal(keys, []string{"d"}) {
		t.Fatalf("Sweep told of %q", keys)
	}
	e.Reset()
	if _, all := rec.take(); all != 1 {
		t.Fatalf("Reset told %d flushes", all)
	}
}

// TestWatcherLayeredAndLeases: RL.ALL reports each of its limits that has
// a cost, alone or in a run of RL.ALL calls (the engine's look-ahead path),
// and leases report acquires and releases but not peeks.
func TestWatcherLayeredAndLeases(t *testing.T) {
	rec := &recorder{}
	e := New(Config{Stripes: 4, Watcher: rec})
	fixed := Rule{KindFixed, 5, min_}
	limit := func(k string, cost int64) Limit { return Limit{Key: []byte(k), Rule: fixed, Cost: cost} }
	all := func(ls ...Limit) Op { return Op{Code: OpAll, All: ls} }
	lease := func(code OpCode, k string, cost int64) Op {
		return Op{Code: code, Key: []byte(k), Rule: Rule{KindConcurrency, 5, min_}, Token: []byte("t"), Cost: cost}
	}
	tests := []struct {
		name string
		ops  []Op
		keys []string
	}{
		{"an RL.ALL: its limits with a cost", []Op{all(limit("e", 1), limit("f", 0), limit("g", -1))}, []string{"e", "g"}},
		{"a run of RL.ALL", []Op{all(limit("h", 1)), all(limit("i", 2))}, []string{"h", "i"}},
		{"an acquire and a release, not a peek", []Op{lease(OpAcquire, "j", 1), lease(OpAcquire, "k", 0), {Code: OpRelease, Key: []byte("j"), Token: []byte("t")}}, []string{"j"}},
	}
	for _, tc := range tests {
		res := make([]Result, len(tc.ops))
		e.Apply(t0, tc.ops, res)
		for i, r := range res {
			if r.Err != nil {
				t.Fatalf("%s: op %d: %v", tc.name, i, r.Err)
			}
		}
		if keys, _ := rec.take(); !slices.Equal(keys, tc.keys) {
			t.Fatalf("%s: told of %q, want %q", tc.name, keys, tc.keys)
		}
	}
}
