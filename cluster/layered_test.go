package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// TestLayeredAndLeasesAcrossLeaderKill: clients on every node run RL.ALL
// on overlapping keys (each call charges the tenant and one of two users)
// and RL.ACQUIRE/RL.RELEASE on one concurrency key, while the leader is
// killed. No key ever admits more than its limit, the tenant's usage is
// exactly the sum of the users' (all or nothing, whatever the outcome of
// the calls that failed), no more leases are ever held than the limit, and
// the surviving replicas agree bit for bit.
func TestLayeredAndLeasesAcrossLeaderKill(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	const (
		userCap   = 40
		tenantCap = 60
		leaseCap  = 3
	)
	hour := int64(time.Hour)
	user := engine.Rule{Kind: engine.KindToken, Limit: userCap, Period: hour}
	tenant := engine.Rule{Kind: engine.KindToken, Limit: tenantCap, Period: hour}
	conc := engine.Rule{Kind: engine.KindConcurrency, Limit: leaseCap, Period: hour}
	old := tc.leader()
	var dead atomic.Int64
	dead.Store(-1)
	var ackedAll [2]atomic.Int64
	var deniedAll, held, maxHeld, acquired atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 32)
	// execute runs op on node i (another one once i is dead): ok says the
	// outcome is known and applied-or-not as res says; down says
	// certainly not applied.
	execute := func(w int, op engine.Op) (res engine.Result, ok, down bool) {
		i := w % 3
		if int64(i) == dead.Load() {
			i = (i + 1) % 3
		}
		rs := make([]engine.Result, 1)
		err := tc.nodes[i].Execute(context.Background(), []engine.Op{op}, rs)
		switch {
		case err == nil:
			return rs[0], rs[0].Err == nil, false
		case errors.Is(err, ErrClusterDown) && !errors.Is(err, ErrOutcomeUnknown):
			return rs[0], false, true
		}
		return rs[0], false, false
	}
	// release ends a lease, retrying until its outcome is known so that
	// none leaks; false after too many tries (reported).
	release := func(w int, token []byte) bool {
		for try := 0; ; try++ {
			if _, ok, _ := execute(w, engine.Op{Code: engine.OpRelease, Key: []byte("conc"), Token: token}); ok {
				return true
			}
			if try > 1000 {
				errc <- fmt.Errorf("release %s: no known outcome", token)
				return false
			}
			time.Sleep(time.Millisecond)
		}
	}
	for w := 0; w < 9; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			u := w % 2
			var mine [][]byte // leases this worker holds, oldest first
			for seq := 0; ; seq++ {
				if stopping(stop) && len(mine) == 0 {
					return
				}
				if w%3 != 2 { // layered limits
					op := engine.Op{Code: engine.OpAll, All: []engine.Limit{
						{Key: []byte(fmt.Sprintf("user:%d", u)), Rule: user, Cost: 1},
						{Key: []byte("tenant"), Rule: tenant, Cost: 1},
					}}
					res, ok, _ := execute(w, op)
					switch {
					case ok && res.Allowed:
						ackedAll[u].Add(1)
					case ok:
						deniedAll.Add(1)
					}
					continue
				}
				// Leases: hold up to two at a time (three workers want six
				// of the three the limit allows), releasing the oldest when
				// full or denied.
				if len(mine) == 2 || len(mine) > 0 && (stopping(stop) || seq%5 == 4) {
					held.Add(-1)
					if !release(w, mine[0]) {
						return
					}
					mine = mine[1:]
					continue
				}
				token := []byte(fmt.Sprintf("w%d-%d", w, seq))
				res, ok, down := execute(w, engine.Op{Code: engine.OpAcquire, Key: []byte("conc"), Rule: conc, Cost: 1, Token: token})
				switch {
				case ok && res.Allowed:
					acquired.Add(1)
					n := held.Add(1)
					for m := maxHeld.Load(); n > m && !maxHeld.CompareAndSwap(m, n); m = maxHeld.Load() {
					}
					if n > leaseCap {
						errc <- fmt.Errorf("%d leases held at once, limit %d", n, leaseCap)
					}
					mine = append(mine, token)
				case !ok && !down: // may have been applied: give it back
					if !release(w, token) {
						return
					}
				}
			}
		}(w)
	}
	waitFor(t, 15*time.Second, func() error {
		if a := ackedAll[0].Load() + ackedAll[1].Load(); a < tenantCap/3 || acquired.Load() < 20 {
			return fmt.Errorf("%d RL.ALL admitted, %d leases so far", a, acquired.Load())
		}
		return nil
	})
	dead.Store(int64(old))
	tc.stop(old)
	waitFor(t, 15*time.Second, func() error {
		if deniedAll.Load() < 50 {
			return fmt.Errorf("%d RL.ALL denied so far", deniedAll.Load())
		}
		return nil
	})
	before := acquired.Load()
	waitFor(t, 15*time.Second, func() error {
		if acquired.Load() < before+20 {
			return fmt.Errorf("%d leases after the kill so far", acquired.Load()-before)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}

	nl := tc.leader()
	peek := func(key string) engine.Result {
		return exec(t, tc.nodes[nl], engine.Op{Code: engine.OpPeek, Key: []byte(key)})[0]
	}
	used := func(key string, limit int64) int64 {
		if r := peek(key); r.Kind != engine.KindNone {
			return limit - r.Remaining
		}
		return 0
	}
	u0, u1, ten := used("user:0", userCap), used("user:1", userCap), used("tenant", tenantCap)
	t.Logf("RL.ALL admitted %d+%d, denied %d; used %d+%d, tenant %d; leases acquired %d, most held at once %d",
		ackedAll[0].Load(), ackedAll[1].Load(), deniedAll.Load(), u0, u1, ten, acquired.Load(), maxHeld.Load())
	if ten != u0+u1 {
		t.Fatalf("tenant used %d, users %d + %d: a call was charged in part", ten, u0, u1)
	}
	if ackedAll[0].Load() > userCap || ackedAll[1].Load() > userCap || ackedAll[0].Load()+ackedAll[1].Load() > tenantCap {
		t.Fatalf("admitted %d and %d over limits %d (users), %d (tenant)", ackedAll[0].Load(), ackedAll[1].Load(), userCap, tenantCap)
	}
	if u0 < ackedAll[0].Load() || u1 < ackedAll[1].Load() {
		t.Fatalf("acknowledged admissions lost: used %d, %d; acknowledged %d, %d", u0, u1, ackedAll[0].Load(), ackedAll[1].Load())
	}
	if r := peek("conc"); r.Kind != engine.KindNone {
		t.Fatalf("leases left after every one was released: %+v", r)
	}
	// The two survivors agree bit for bit.
	other := 3 - old - nl
	want := tc.nodes[nl].fsm.applied.Load()
	waitFor(t, 10*time.Second, func() error {
		if got := tc.nodes[other].fsm.applied.Load(); got < want {
			return fmt.Errorf("node %d applied %d < %d", other+1, got, want)
		}
		return nil
	})
	if a, b := dump(tc.engines[nl]), dump(tc.engines[other]); a != b {
		t.Fatalf("survivors differ:\n%s\nvs\n%s", clip(a), clip(b))
	}
	da, _ := tc.engines[nl].Digest()
	db, _ := tc.engines[other].Digest()
	if da != db {
		t.Fatalf("digests differ: %x vs %x", da, db)
	}
}

// stopping reports whether stop is closed.
func stopping(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// TestSnapshotRestoreLeasesAndAll: leases and RL.ALL's charges survive a
// restart from a snapshot plus the log after it, bit for bit.
func TestSnapshotRestoreLeasesAndAll(t *testing.T) {
	dir := t.TempDir()
	tc := newTestCluster(t, 1, func(_ int, c *Config) {
		c.InMemory = false
		c.DataDir = dir
	})
	n := tc.nodes[0]
	conc := engine.Rule{Kind: engine.KindConcurrency, Limit: 3, Period: int64(time.Hour)}
	acquire := func(token string, cost int64) engine.Op {
		return engine.Op{Code: engine.OpAcquire, Key: []byte("conc"), Rule: conc, Cost: cost, Token: []byte(token)}
	}
	all := engine.Op{Code: engine.OpAll, All: []engine.Limit{
		{Key: []byte("u"), Rule: tokenRule, Cost: 2},
		{Key: []byte("t"), Rule: engine.Rule{Kind: engine.KindLog, Limit: 4, Period: int64(time.Hour)}, Cost: 1},
	}}
	if got := allowed(exec(t, n, acquire("a", 1), acquire("b", 2), all)); got != "111" {
		t.Fatalf("before the snapshot: %s", got)
	}
	if err := n.Snapshot(context.Background()); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	tc.clock.advance(time.Second)
	res := exec(t, n, engine.Op{Code: engine.OpRelease, Key: []byte("conc"), Token: []byte("a")}, acquire("c", 1), all)
	if res[0].Count != 1 || allowed(res[1:]) != "11" {
		t.Fatalf("after the snapshot: %d %s", res[0].Count, allowed(res[1:]))
	}
	before := dump(tc.engines[0])
	tc.stop(0)
	tc.start(0)
	tc.waitReady()
	if after := dump(tc.engines[0]); after != before {
		t.Fatalf("state after restart:\n%s\nwant\n%s", clip(after), clip(before))
	}
	// Held: b (2) and c (1) of 3; u has 1 token of 5 left.
	res = exec(t, tc.nodes[0], acquire("d", 1), all, acquire("b", 5))
	if got := allowed(res); got != "001" || res[1].Each[0].Remaining != 1 {
		t.Fatalf("after restart: %s, %+v", got, res[1].Each)
	}
}
