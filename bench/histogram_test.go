package bench

import (
	"math"
	"testing"
)

func TestHistogramBucketsCoverEveryValue(t *testing.T) {
	prevHi := int64(-1)
	for i := 0; i < histBuckets; i++ {
		lo, hi := histBounds(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if hi < lo {
			t.Fatalf("bucket %d: hi %d < lo %d", i, hi, lo)
		}
		if histIndex(lo) != i || histIndex(hi) != i {
			t.Fatalf("bucket %d [%d,%d]: index of lo %d, of hi %d", i, lo, hi, histIndex(lo), histIndex(hi))
		}
		if lo >= 256 && float64(hi-lo+1)/float64(lo) > 1.0/64+1e-12 {
			t.Fatalf("bucket %d [%d,%d] is wider than 1/64 of its value", i, lo, hi)
		}
		prevHi = hi
		if hi == math.MaxInt64 {
			return
		}
	}
	t.Fatalf("buckets end at %d, before MaxInt64", prevHi)
}

func TestHistogramExactSmallValues(t *testing.T) {
	h := NewHistogram()
	for v := int64(1); v <= 100; v++ {
		h.Record(v)
	}
	for _, c := range []struct {
		q    float64
		want int64
	}{{0.5, 50}, {0.9, 90}, {0.99, 99}, {0.999, 100}, {1, 100}, {0, 1}} {
		if got := h.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%g) = %d, want %d", c.q, got, c.want)
		}
	}
	if h.Count() != 100 || h.Min() != 1 || h.Max() != 100 || h.Mean() != 50.5 {
		t.Errorf("count %d min %d max %d mean %g", h.Count(), h.Min(), h.Max(), h.Mean())
	}
}

func TestHistogramPercentilesWithinOnePercent(t *testing.T) {
	h := NewHistogram()
	const n = 1_000_000
	for v := int64(1); v <= n; v++ {
		h.Record(v * 1000) // 1 µs to 1 s
	}
	s := h.Summary()
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"p50", s.P50, n / 2 * 1000},
		{"p90", s.P90, n * 9 / 10 * 1000},
		{"p99", s.P99, n * 99 / 100 * 1000},
		{"p99.9", s.P999, n * 999 / 1000 * 1000},
	} {
		if err := math.Abs(float64(c.got-c.want)) / float64(c.want); err > 0.01 {
			t.Errorf("%s = %d, want %d within 1%% (off by %.3f%%)", c.name, c.got, c.want, err*100)
		}
	}
	if s.Max != n*1000 {
		t.Errorf("max = %d, want %d", s.Max, n*1000)
	}
}

func TestHistogramMergeAndReset(t *testing.T) {
	a, b := NewHistogram(), NewHistogram()
	for v := int64(0); v < 1000; v++ {
		a.Record(v)
		b.Record(v + 1000)
	}
	a.Merge(b)
	a.Merge(nil)
	a.Merge(NewHistogram())
	if a.Count() != 2000 || a.Min() != 0 || a.Max() != 1999 {
		t.Fatalf("merged: count %d min %d max %d", a.Count(), a.Min(), a.Max())
	}
	if p := a.Quantile(0.5); p < 990 || p > 1010 {
		t.Errorf("merged p50 = %d, want about 1000", p)
	}
	a.Reset()
	if a.Count() != 0 || a.Quantile(0.5) != 0 || a.Max() != 0 || a.Min() != 0 {
		t.Errorf("after Reset: count %d p50 %d", a.Count(), a.Quantile(0.5))
	}
}

func TestHistogramNegativeAndHuge(t *testing.T) {
	h := NewHistogram()
	h.Record(-5)
	h.Record(math.MaxInt64)
	if h.Min() != 0 || h.Max() != math.MaxInt64 {
		t.Fatalf("min %d max %d", h.Min(), h.Max())
	}
	if q := h.Quantile(0.99); q != math.MaxInt64 && q < math.MaxInt64/2 {
		t.Errorf("p99 = %d", q)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %g, want %g", c.in, got, c.want)
		}
	}
}
