package engine

import (
	"fmt"
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
	e := New(Config{Shards: 8})
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
