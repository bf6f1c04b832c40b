package engine

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// TestOneKeyManyGoroutines: concurrent callers on one key admit exactly the
// limit, for every kind.
func TestOneKeyManyGoroutines(t *testing.T) {
	const goroutines, each = 8, 200
	for _, r := range []Rule{
		{KindToken, 500, min_}, {KindLeaky, 500, min_}, {KindFixed, 500, 24 * 60 * min_},
		{KindSliding, 500, 24 * 60 * min_}, {KindLog, 500, 24 * 60 * min_}, {KindGCRA, 500, min_},
	} {
		t.Run(r.Kind.String(), func(t *testing.T) {
			e := newTestEngine()
			e.SetClockState(ClockState{Frozen: true, FrozenAt: t0, Last: t0})
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res := make([]Result, 1)
					for i := range each {
						var ok bool
						if (g+i)%2 == 0 {
							ok = e.Decide(t0, []byte("hot"), r, 1).Allowed
						} else {
							e.Apply(0, []Op{{Code: OpDecide, Key: []byte("hot"), Rule: r, Cost: 1}}, res)
							ok = res[0].Allowed
						}
						if ok {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != 500 {
				t.Fatalf("admitted %d, want exactly 500", got)
			}
		})
	}
}

// TestManyKeysParallel: goroutines on disjoint and shared keys keep every
// key's count exact and the index consistent.
func TestManyKeysParallel(t *testing.T) {
	e := New(Config{Stripes: 8})
	const goroutines, keys = 6, 3000
	r := Rule{KindFixed, 1000, 24 * 60 * min_}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys {
				k := []byte(fmt.Sprintf("key:%d", (i*7+g)%keys))
				if !e.Decide(t0, k, r, 1).Allowed {
					t.Error("denied below the limit")
					return
				}
				if i%100 == 0 {
					e.Len()
					e.Sweep(t0, 50)
				}
			}
		}()
	}
	wg.Wait()
	if e.Len() != keys {
		t.Fatalf("Len %d, want %d", e.Len(), keys)
	}
	for i := range keys {
		k := []byte(fmt.Sprintf("key:%d", i))
		if got := e.Decide(t0, k, r, 0).Remaining; got != 1000-goroutines {
			t.Fatalf("%s remaining %d, want %d", k, got, 1000-goroutines)
		}
	}
}

// TestAllManyGoroutines: concurrent RL.ALL calls over overlapping keys,
// named in random orders, with single decisions and leases on other
// goroutines, never deadlock and charge all or nothing: at the end each
// key's usage is exactly what the admitted calls naming it took, and no
// key admitted more than its capacity.
func TestAllManyGoroutines(t *testing.T) {
	const goroutines, each, nkeys, capacity = 8, 300, 5, 400
	e := New(Config{Stripes: 4, MaxLogLimit: 1000}) // few stripes: keys share them
	e.SetClockState(ClockState{Frozen: true, FrozenAt: t0, Last: t0})
	r := Rule{KindToken, capacity, 24 * 60 * min_}
	var used [nkeys]atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 5))
			res := make([]Result, 1)
			for range each {
				if g == 0 { // leases on a key of their own, in the same stripes
					e.Apply(0, []Op{{Code: OpAcquire, Key: []byte("lease"), Rule: Rule{KindConcurrency, 2, min_}, Cost: 1, Token: []byte("t")}}, res)
					e.Apply(0, []Op{{Code: OpRelease, Key: []byte("lease"), Token: []byte("t")}}, res)
					continue
				}
				perm := rng.Perm(nkeys)[:1+rng.IntN(nkeys)]
				lims := make([]Limit, len(perm))
				for i, k := range perm {
					lims[i] = Limit{Key: []byte(fmt.Sprint("k", k)), Rule: r, Cost: 1 + int64(k)}
				}
				e.Apply(0, []Op{{Code: OpAll, All: lims}}, res)
				if res[0].Err != nil {
					t.Error(res[0].Err)
					return
				}
				if res[0].Allowed {
					for _, k := range perm {
						used[k].Add(1 + int64(k))
					}
				}
			}
		}()
	}
	wg.Wait()
	for k := range nkeys {
		p := e.peek(t0, []byte(fmt.Sprint("k", k)))
		got := int64(0)
		if p.Kind != KindNone {
			got = capacity - p.Remaining
		}
		if got != used[k].Load() || got > capacity {
			t.Errorf("key k%d: %d used, the admitted calls took %d (capacity %d)", k, got, used[k].Load(), capacity)
		}
	}
}
