package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestApplyLookAheadSameAsOneByOne: a batch whose decisions Apply looks up
// ahead (runs of OpDecide) gives the same results and leaves the same state
// as the same ops applied one Apply call each, including repeated keys in a
// run, wrong types, bad rules, long (arena) keys, and runs cut by other ops.
func TestApplyLookAheadSameAsOneByOne(t *testing.T) {
	rules := []Rule{
		{KindToken, 3, sec}, {KindLeaky, 2, sec}, {KindFixed, 4, sec},
		{KindSliding, 5, sec}, {KindLog, 3, sec}, {KindGCRA, 2, sec},
		{KindToken, 0, sec}, // bad: limit 0
	}
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			batched, single := New(Config{Stripes: 4}), New(Config{Stripes: 4})
			now := t0
			for range 30 {
				ops := make([]Op, 1+rng.IntN(3*lookAhead))
				for i := range ops {
					key := fmt.Sprintf("k%d", rng.IntN(40))
					if rng.IntN(8) == 0 {
						key = fmt.Sprintf("a-long-key-kept-in-the-arena-%d", rng.IntN(10))
					}
					ops[i] = Op{Code: OpDecide, Key: []byte(key), Rule: rules[rng.IntN(len(rules))], Cost: int64(rng.IntN(3))}
					switch rng.IntN(12) {
					case 0:
						ops[i].Code = OpDelete
					case 1:
						ops[i].Code = OpPeek
					}
				}
				now += int64(rng.IntN(400)) * ms
				for _, e := range []*Engine{batched, single} {
					e.SetClockState(ClockState{Frozen: true, FrozenAt: now, Last: now})
				}
				got := make([]Result, len(ops))
				batched.Apply(0, ops, got)
				for i := range ops {
					want := make([]Result, 1)
					single.Apply(0, ops[i:i+1], want)
					if fmt.Sprint(got[i]) != fmt.Sprint(want[0]) {
						t.Fatalf("op %d (code %d) %s %v cost %d: batched %+v, one by one %+v",
							i, ops[i].Code, ops[i].Key, ops[i].Rule, ops[i].Cost, got[i], want[0])
					}
				}
				sumB, keysB := batched.Digest()
				sumS, keysS := single.Digest()
				if sumB != sumS || keysB != keysS {
					t.Fatalf("state differs after the batch: %d keys vs %d", keysB, keysS)
				}
			}
		})
	}
}

// TestApplyAllRunSameAsOneByOne: runs of RL.ALL ops, which Apply looks up
// ahead and whose hashes it hands on, give the same results and leave the
// same state as the same ops applied one Apply call each, including runs
// with more keys than the look-ahead takes, duplicate keys, wrong types,
// empty and oversized calls, and calls with and without room for results.
func TestApplyAllRunSameAsOneByOne(t *testing.T) {
	rules := []Rule{
		{KindToken, 30, sec}, {KindLeaky, 20, sec}, {KindFixed, 40, sec},
		{KindSliding, 50, sec}, {KindLog, 30, sec}, {KindToken, 3, sec},
	}
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 2))
			batched, single := New(Config{Stripes: 4}), New(Config{Stripes: 4})
			now := t0
			for range 20 {
				ops := make([]Op, 1+rng.IntN(2*lookAhead))
				for i := range ops {
					n := 1 + rng.IntN(8)
					switch rng.IntN(16) {
					case 0:
						n = 0
					case 1:
						n = MaxAll
					case 2:
						n = MaxAll + 1
					}
					lims := make([]Limit, n)
					for j := range lims {
						key := fmt.Sprintf("k%d", rng.IntN(200))
						if n >= MaxAll {
							key = fmt.Sprintf("big%d-%d", i, j) // distinct
						}
						lims[j] = Limit{Key: []byte(key), Rule: rules[rng.IntN(len(rules))], Cost: int64(rng.IntN(3))}
					}
					ops[i] = Op{Code: OpAll, All: lims}
					if rng.IntN(2) == 0 {
						ops[i].Each = make([]Result, n)
					}
				}
				now += int64(rng.IntN(400)) * ms
				for _, e := range []*Engine{batched, single} {
					e.SetClockState(ClockState{Frozen: true, FrozenAt: now, Last: now})
				}
				got := make([]Result, len(ops))
				batched.Apply(0, ops, got)
				// Printed now: the one-by-one calls reuse the ops' Each.
				gotS := make([]string, len(ops))
				for i := range got {
					gotS[i] = fmt.Sprint(got[i])
				}
				for i := range ops {
					want := make([]Result, 1)
					single.Apply(0, ops[i:i+1], want)
					if gotS[i] != fmt.Sprint(want[0]) {
						t.Fatalf("op %d (%d limits): batched %s, one by one %+v", i, len(ops[i].All), gotS[i], want[0])
					}
				}
				sumB, keysB := batched.Digest()
				sumS, keysS := single.Digest()
				if sumB != sumS || keysB != keysS {
					t.Fatalf("state differs after the batch: %d keys vs %d", keysB, keysS)
				}
			}
		})
	}
}
