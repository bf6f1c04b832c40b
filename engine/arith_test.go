package engine

import (
	"math"
	"testing"
)

func TestArith(t *testing.T) {
	const m53 = uint64(1) << 53
	for _, c := range []struct {
		k, m, sub uint64
		want      int64
	}{
		{1, 1e6, 0, 1},
		{1, 1e6 + 1, 0, 2},
		{3, 1e6, 1, 3},
		{1, 1, 0, 1},
		{1 << 32, 1 << 32, 0, 18446744073710}, // 2^64 ns: the 128-bit path
		{1 << 32, 1 << 32, 1, 18446744073710}, // 2^64-1 ns: the 64-bit path
		{m53, uint64(maxPeriod), 0, maxReply}, // saturates
		{m53, uint64(maxPeriod), uint64(maxPeriod) - 1, maxReply},
		{1, uint64(maxPeriod), 0, maxPeriod / nsPerMs},
	} {
		if got := ceilMsMulSub(c.k, c.m, c.sub); got != c.want {
			t.Errorf("ceilMsMulSub(%d, %d, %d) = %d, want %d", c.k, c.m, c.sub, got, c.want)
		}
	}
	for _, c := range []struct{ a, b, c, want uint64 }{
		{7, 3, 2, 10},
		{1 << 40, 1 << 40, 1 << 30, 1 << 50},
		{math.MaxUint64, 3, 4, math.MaxUint64 / 4 * 3},
		{1 << 40, 1 << 40, 1, math.MaxUint64}, // does not fit
		{5, 5, 0, math.MaxUint64},
	} {
		got := mulDiv(c.a, c.b, c.c)
		// The third case is exact to within one of the truncation.
		if got != c.want && !(c.a == math.MaxUint64 && got-c.want <= 3) {
			t.Errorf("mulDiv(%d, %d, %d) = %d, want %d", c.a, c.b, c.c, got, c.want)
		}
	}
	for _, c := range []struct{ ns, want int64 }{
		{-5, 0}, {0, 0}, {999_999, 0}, {1_000_000, 1}, {1e9, 1}, {1e9 + 999_999, 1}, {1e9 + 1e6, 2}, {59_999_999_999, 60},
	} {
		if got := secsUp(c.ns); got != c.want {
			t.Errorf("secsUp(%d) = %d, want %d", c.ns, got, c.want)
		}
	}
	for _, c := range []struct{ ns, want int64 }{{-1, 0}, {0, 0}, {1, 1}, {1e6, 1}, {1e6 + 1, 2}, {math.MaxInt64, math.MaxInt64/nsPerMs + 1}} {
		if got := ceilMs(c.ns); got != min(c.want, maxReply) {
			t.Errorf("ceilMs(%d) = %d, want %d", c.ns, got, c.want)
		}
	}
	if satAdd(math.MaxInt64, 1) != math.MaxInt64 || satAdd(math.MinInt64, -1) != math.MinInt64 || satAdd(3, -5) != -2 {
		t.Error("satAdd")
	}
	if align(-1, 10) != -10 || align(10, 10) != 10 || align(19, 10) != 10 {
		t.Error("align")
	}
}

// TestExtremes: the largest accepted arguments neither overflow nor lose
// exactness; reply times saturate at 2^53 ms.
func TestExtremes(t *testing.T) {
	e := newTestEngine()
	big := Rule{KindToken, maxCount, maxPeriod}
	r := e.Decide(t0, []byte("t"), big, maxCount)
	if !r.Allowed || r.Remaining != 0 || r.ResetAfter != maxReply {
		t.Fatalf("token 2^53 over 366d: %+v", r)
	}
	r = e.Decide(t0+1, []byte("t"), big, 1)
	if r.Allowed || r.RetryAfter != maxPeriod/nsPerMs {
		t.Fatalf("next unit: %+v", r)
	}
	if ttl := e.inspect(t0, OpTTL, []byte("t")).TTL; ttl != math.MaxInt64 {
		t.Fatalf("ttl %d", ttl)
	}
	r = e.Decide(t0, []byte("s"), Rule{KindSliding, maxCount, maxPeriod}, maxCount)
	if !r.Allowed || r.ResetAfter <= 0 {
		t.Fatalf("sliding: %+v", r)
	}
	r = e.Decide(t0+maxPeriod, []byte("s"), Rule{KindSliding, maxCount, maxPeriod}, maxCount)
	if r.Allowed || r.RetryAfter < 1 || r.Remaining == 0 || r.Remaining == maxCount {
		t.Fatalf("sliding next window: %+v", r)
	}
	g := Rule{KindGCRA, 1 << 31, 1 << 31} // T*Limit = 2^62
	if r := e.Decide(t0, []byte("g"), g, 1<<31); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("gcra at 2^62: %+v", r)
	}
	if r := e.Decide(t0, []byte("g"), g, 1<<31); r.Allowed || r.RetryAfter <= 0 {
		t.Fatalf("gcra beyond: %+v", r)
	}
	if r := e.Decide(t0, []byte("g2"), Rule{KindGCRA, 1<<31 + 1, 1 << 31}, 1); r.Err == nil {
		t.Fatal("gcra T*Limit > 2^62 accepted")
	}
	if r := e.Decide(t0, []byte("t2"), Rule{KindToken, maxCount + 1, sec}, 1); r.Err == nil {
		t.Fatal("limit > 2^53 accepted")
	}
	if r := e.Decide(t0, []byte("t2"), Rule{KindToken, 5, sec}, maxCount+1); r.Err == nil {
		t.Fatal("cost > 2^53 accepted")
	}
}
