package engine

import (
	"fmt"
	"testing"
)

// TestScanCalls: over a keyspace that does not change, SCAN returns every
// key exactly once, in max(1, ceil(keys/COUNT)) calls, however many lock
// stripes are empty; also after deletions have left holes in the slabs.
func TestScanCalls(t *testing.T) {
	tests := []struct {
		keys, count, stripes int
		deleteEvery          int // delete every n-th key first (0: none)
	}{
		{0, 10, 256, 0},
		{0, 10, 1 << 16, 0},
		{1, 10, 256, 0},
		{10, 10, 256, 0},
		{25, 10, 256, 0},
		{25, 1, 16, 0},
		{100000, 10, 256, 0},
		{100000, 1000, 256, 0},
		{10000, 10, 16, 3},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("keys=%d,count=%d,stripes=%d,del=%d", tc.keys, tc.count, tc.stripes, tc.deleteEvery), func(t *testing.T) {
			e := New(Config{Stripes: tc.stripes})
			want := map[string]int{}
			for i := range tc.keys {
				k := fmt.Sprintf("key:%d", i)
				e.Decide(t0, []byte(k), Rule{KindFixed, 5, min_}, 1)
				want[k] = 0
			}
			if tc.deleteEvery > 0 {
				for i := 0; i < tc.keys; i += tc.deleteEvery {
					k := fmt.Sprintf("key:%d", i)
					e.delete(t0, []byte(k))
					delete(want, k)
				}
			}
			calls := 0
			var cursor uint64
			for {
				r := e.scan(t0, &Op{Code: OpScan, Cursor: cursor, Count: int64(tc.count)})
				calls++
				for _, k := range r.Keys {
					if _, ok := want[string(k)]; !ok {
						t.Fatalf("unexpected key %q", k)
					}
					want[string(k)]++
				}
				if cursor = r.Cursor; cursor == 0 {
					break
				}
				if calls > 2*tc.keys+10 {
					t.Fatal("scan never ended")
				}
			}
			for k, n := range want {
				if n != 1 {
					t.Fatalf("%s returned %d times", k, n)
				}
			}
			if wantCalls := max(1, (len(want)+tc.count-1)/tc.count); calls != wantCalls {
				t.Fatalf("%d keys took %d calls with COUNT %d, want %d", len(want), calls, tc.count, wantCalls)
			}
		})
	}
}
