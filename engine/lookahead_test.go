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
			batched, single := New(Config{Shards: 4}), New(Config{Shards: 4})
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
