package resp

import (
	"context"
	"fmt"
	"testing"
)

// TestScanCallsOverRESP: SCAN over 0, 25 and 100k keys returns every key
// exactly once, in max(1, ceil(keys/COUNT)) calls (the default COUNT is 10),
// whatever the number of empty lock stripes (the keys' windows never end:
// the clock is frozen).
func TestScanCallsOverRESP(t *testing.T) {
	tests := []struct {
		keys  int
		count int64 // 0: no COUNT argument (10)
		calls int
	}{
		{0, 0, 1},
		{25, 0, 3},
		{25, 100, 1},
		{100000, 1000, 100},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("keys=%d,count=%d", tc.keys, tc.count), func(t *testing.T) {
			ctx := context.Background()
			// A frozen clock: RL.FIXED's windows end on the wall clock's
			// minutes, and a key back at its initial state counts as
			// absent, so a run across a minute boundary would lose them.
			rdb := newClient(t, debugServer(t, epoch2030), 3)
			want := make(map[string]int, tc.keys)
			const batch = 5000
			for i := 0; i < tc.keys; i += batch {
				pipe := rdb.Pipeline()
				for j := i; j < min(i+batch, tc.keys); j++ {
					k := fmt.Sprintf("user:%d", j)
					pipe.Do(ctx, "RL.FIXED", k, 10, "1m")
					want[k] = 0
				}
				if _, err := pipe.Exec(ctx); err != nil {
					t.Fatal(err)
				}
			}
			calls := 0
			var cursor uint64
			for {
				var keys []string
				var err error
				if tc.count == 0 {
					var res []any
					res, err = rdb.Do(ctx, "SCAN", cursor).Slice()
					if err == nil {
						_, err = fmt.Sscan(res[0].(string), &cursor)
						for _, k := range res[1].([]any) {
							keys = append(keys, k.(string))
						}
					}
				} else {
					keys, cursor, err = rdb.Scan(ctx, cursor, "", tc.count).Result()
				}
				if err != nil {
					t.Fatal(err)
				}
				calls++
				for _, k := range keys {
					if _, ok := want[k]; !ok {
						t.Fatalf("unexpected key %q", k)
					}
					want[k]++
				}
				if cursor == 0 {
					break
				}
				if calls > tc.keys+10 {
					t.Fatal("scan never ended")
				}
			}
			for k, n := range want {
				if n != 1 {
					t.Fatalf("%s returned %d times", k, n)
				}
			}
			if calls != tc.calls {
				t.Fatalf("%d keys took %d SCAN calls, want %d", tc.keys, calls, tc.calls)
			}
		})
	}
}
