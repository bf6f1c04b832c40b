package bench

import "testing"

// TestLatencyPercentilesAreExact: the nearest-rank percentiles of the
// recorded values, whatever their order, across merged recorders.
func TestLatencyPercentilesAreExact(t *testing.T) {
	var a, b Latencies
	for v := int64(1000); v >= 1; v-- { // recorded out of order, in two halves
		if v%2 == 0 {
			a.Record(v * 1000)
		} else {
			b.Record(v * 1000)
		}
	}
	a.Merge(b)
	a.Merge(nil)
	got := a.Summary()
	want := Percentiles{P50: 500_000, P90: 900_000, P99: 990_000, P999: 999_000, Max: 1_000_000}
	if got != want {
		t.Errorf("Summary = %+v, want %+v", got, want)
	}
	var small Latencies
	for _, v := range []int64{30, 10, 20} {
		small.Record(v)
	}
	if got := small.Summary(); got.P50 != 20 || got.P90 != 30 || got.Max != 30 {
		t.Errorf("three values: %+v", got)
	}
	if got := (Latencies{}).Summary(); got != (Percentiles{}) {
		t.Errorf("no values: %+v", got)
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
