package gctune

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name              string
		base              int
		minHeadroom, live int64
		max               int
		want              int
	}{
		{"large heap keeps base", 25, 64 * mib, 1 << 30, 1000, 25},
		{"small heap gets the headroom", 25, 64 * mib, 10 * mib, 1000, 640},
		{"where base starts to suffice", 25, 64 * mib, 256 * mib, 1000, 25},
		{"just below it", 25, 64 * mib, 256*mib - 1, 1000, 26},
		{"rounds up", 10, 100, 3, 100000, 3334},
		{"tiny heap capped", 25, 64 * mib, 1 * mib, 1000, 1000},
		{"before the first collection", 25, 64 * mib, 0, 1000, 1000},
		{"negative live heap", 25, 64 * mib, -1, 1000, 1000},
		{"no headroom asked", 25, 0, 1 * mib, 1000, 25},
		{"base above the cap wins", 1500, 64 * mib, 1 * mib, 1000, 1500},
		{"product overflows 64 bits", 25, math.MaxInt64, 1 << 40, 1000, 1000},
		{"product overflows, quotient small", 25, math.MaxInt64, math.MaxInt64, 1000, 100},
		{"quotient overflows 64 bits", 25, math.MaxInt64, 1, 1000, 1000},
	}
	for _, c := range cases {
		if got := Percent(c.base, c.minHeadroom, c.live, c.max); got != c.want {
			t.Errorf("%s: Percent(%d, %d, %d, %d) = %d, want %d", c.name, c.base, c.minHeadroom, c.live, c.max, got, c.want)
		}
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Base: 0, MinHeadroom: 1},
		{Base: -1, MinHeadroom: 1},
		{Base: 25, MinHeadroom: 0},
		{Base: 25, MinHeadroom: -1},
		{Base: 25, MinHeadroom: 1, Max: -1},
	} {
		if tu, err := Start(context.Background(), cfg); err == nil {
			tu.Stop()
			t.Errorf("%+v accepted", cfg)
		}
	}
}

// gcPercent reads the GC percent without setting it.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// keepGCPercent restores the test process's GC percent when t ends.
func keepGCPercent(t *testing.T) {
	orig := debug.SetGCPercent(100)
	debug.SetGCPercent(orig)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
}

// waitPercent collects until the GC percent is want.
func waitPercent(t *testing.T, want int) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		runtime.GC()
		if got := gcPercent(); got != want {
			return fmt.Errorf("GC percent %d, want %d", got, want)
		}
		return nil
	})
}

// checkStopped: a stopped Tuner has restored base and no longer sets the
// GC percent after a collection.
func checkStopped(t *testing.T, base int) {
	t.Helper()
	if p := debug.SetGCPercent(55); p != base {
		t.Errorf("GC percent %d after stopping, want the base %d", p, base)
	}
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if p := debug.SetGCPercent(base); p != 55 {
		t.Errorf("GC percent %d after collections, want 55: the tuner still runs", p)
	}
}

// TestTunerSetsPercentAfterGC: a collection makes the Tuner set the GC
// percent; Stop restores the base and stops it.
func TestTunerSetsPercentAfterGC(t *testing.T) {
	keepGCPercent(t)
	// No heap is large enough for a petabyte of headroom: the cap.
	tu, err := Start(context.Background(), Config{Base: 30, MinHeadroom: 1 << 50, Max: 700})
	if err != nil {
		t.Fatal(err)
	}
	defer tu.Stop()
	if p := gcPercent(); p != 700 {
		t.Errorf("GC percent %d after Start, want 700", p)
	}
	// Something else changed it: the next collection sets it again.
	debug.SetGCPercent(30)
	waitPercent(t, 700)
	debug.SetGCPercent(30)
	waitPercent(t, 700)
	tu.Stop()
	tu.Stop() // a second Stop is harmless
	checkStopped(t, 30)
}

// TestTunerBaseForLargeHeap: when the live heap alone gives the headroom,
// the Tuner sets the base.
func TestTunerBaseForLargeHeap(t *testing.T) {
	keepGCPercent(t)
	debug.SetGCPercent(300)
	tu, err := Start(context.Background(), Config{Base: 40, MinHeadroom: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tu.Stop()
	waitPercent(t, 40)
}

// TestTunerStopsOnCancel: cancelling the context stops the Tuner.
func TestTunerStopsOnCancel(t *testing.T) {
	keepGCPercent(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tu, err := Start(ctx, Config{Base: 35, MinHeadroom: 1 << 50})
	if err != nil {
		t.Fatal(err)
	}
	debug.SetGCPercent(35)
	waitPercent(t, DefaultMax)
	cancel()
	select {
	case <-tu.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the Tuner did not stop when its context was cancelled")
	}
	checkStopped(t, 35)
	tu.Stop() // after the context, harmless
}

// TestTunerFollowsLiveHeap: with about 16 MiB live and 64 MiB of minimum
// headroom, the Tuner sets about 400 percent: what Percent gives for the
// live heap the last collection found.
func TestTunerFollowsLiveHeap(t *testing.T) {
	keepGCPercent(t)
	const mib = 1 << 20
	live := make([]byte, 16*mib)
	tu, err := Start(context.Background(), Config{Base: 25, MinHeadroom: 64 * mib})
	if err != nil {
		t.Fatal(err)
	}
	defer tu.Stop()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	want := -1
	// Up to 10s for the tuner to catch up; the check below says what it set.
	_ = testkit.Poll(10*time.Second, 0, func() error {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		metrics.Read(s)
		if want = Percent(25, 64*mib, int64(s[0].Value.Uint64()), DefaultMax); gcPercent() != want {
			return errors.New("not yet")
		}
		return nil
	})
	if p := gcPercent(); p != want || p <= 200 || p > 400 {
		t.Errorf("GC percent %d with a live heap of %d bytes, want %d (about 400)", p, s[0].Value.Uint64(), want)
	}
	runtime.KeepAlive(live)
}
