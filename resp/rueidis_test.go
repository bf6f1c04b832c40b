package resp

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/internal/testkit"
)

// TestRueidisDefaults: rueidis with its default options (client-side
// caching on, RESP3, CLUSTER SLOTS probe) connects, runs RL.* commands with
// Do and DoMulti, and its cached RL.PEEK is invalidated by the server's push
// when another connection changes the key, long before the cache's TTL.
func TestRueidisDefaults(t *testing.T) {
	tr := NewTracker(0)
	addr := startServer(t, Config{Tracker: tr})
	ctx := context.Background()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		t.Fatalf("rueidis with defaults: %v", err)
	}
	defer client.Close()

	fixed := func(key string) rueidis.Completed {
		return client.B().Arbitrary("RL.FIXED").Keys(key).Args("100", "1h").Build()
	}
	got, err := client.Do(ctx, fixed("k")).AsIntSlice()
	if err != nil || len(got) != 5 || got[0] != 1 || got[2] != 99 {
		t.Fatalf("Do RL.FIXED = %v, %v", got, err)
	}
	for i, r := range client.DoMulti(ctx, fixed("k"), fixed("k"), fixed("other")) {
		v, err := r.AsIntSlice()
		if want := []int64{98, 97, 99}[i]; err != nil || len(v) != 5 || v[2] != want {
			t.Fatalf("DoMulti[%d] = %v, %v; want remaining %d", i, v, err, want)
		}
	}

	const ttl = time.Hour // the cache must not expire by itself during the test
	cached := func() ([]int64, bool) {
		t.Helper()
		// An arbitrary read-only command is cacheable (commands are
		// single use: build one per call).
		peek := rueidis.Cacheable(client.B().Arbitrary("RL.PEEK").Keys("k").ReadOnly())
		res := client.DoCache(ctx, peek, ttl)
		v, err := res.AsIntSlice()
		if err != nil || len(v) != 5 {
			t.Fatalf("DoCache RL.PEEK = %v, %v", v, err)
		}
		return v, res.IsCacheHit()
	}
	if v, hit := cached(); hit || v[2] != 97 {
		t.Fatalf("first DoCache: %v, hit %v", v, hit)
	}
	if v, hit := cached(); !hit || v[2] != 97 {
		t.Fatalf("second DoCache: %v, hit %v; want a cache hit", v, hit)
	}
	if tr.Keys() == 0 {
		t.Fatal("the cached read was not tracked")
	}

	// Another connection takes a unit: the push invalidates the cache.
	other := newClient(t, addr, 3)
	if err := other.Do(ctx, "RL.FIXED", "k", 100, "1h").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, time.Millisecond, func() error {
		if v, _ := cached(); v[2] != 96 {
			return fmt.Errorf("cached RL.PEEK still %v after another connection's RL.FIXED", v)
		}
		return nil
	})
	if v, hit := cached(); !hit || v[2] != 96 {
		t.Fatalf("after the refill: %v, hit %v", v, hit)
	}
}
