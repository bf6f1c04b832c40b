package bench

import (
	"math"
	"math/bits"
)

// histSubBits is the number of significant bits kept per value: every
// bucket above 2^histSubBits spans 1/2^(histSubBits-1) of its value, so a
// reported percentile is within 0.8% of the exact one.
const histSubBits = 7

const (
	histHalf    = 1 << (histSubBits - 1)                 // sub-buckets per power of two
	histBuckets = (64-histSubBits+1)*histHalf + histHalf // enough for any int64
)

// Histogram is a log-bucketed (HDR-style) histogram of non-negative int64
// values, latencies in nanoseconds here. Values below 128 are exact; above,
// each power of two is split into 64 buckets. Recording is a few
// instructions and never allocates. A Histogram is not safe for concurrent
// use: give each goroutine its own and Merge them.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	min    int64
	max    int64
	sum    float64
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{min: math.MaxInt64}
}

// histIndex is the bucket of v (v >= 0).
func histIndex(v int64) int {
	u := uint64(v)
	shift := bits.Len64(u) - histSubBits
	if shift <= 0 {
		return int(u)
	}
	return shift*histHalf + int(u>>uint(shift))
}

// histBounds is the smallest and largest value that fall in bucket i.
func histBounds(i int) (lo, hi int64) {
	if i < 2*histHalf {
		return int64(i), int64(i)
	}
	shift := i/histHalf - 1
	top := uint64(i - shift*histHalf)
	lo = int64(top << uint(shift))
	hi = int64(((top + 1) << uint(shift)) - 1)
	if hi < lo { // the last bucket of int64
		hi = math.MaxInt64
	}
	return lo, hi
}

// Record adds one value; negative values count as 0.
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[histIndex(v)]++
	h.n++
	h.sum += float64(v)
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

// Merge adds every value recorded in o.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// Reset forgets every value.
func (h *Histogram) Reset() { *h = Histogram{min: math.MaxInt64} }

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest value recorded (exact), 0 when empty.
func (h *Histogram) Max() int64 {
	if h.n == 0 {
		return 0
	}
	return h.max
}

// Min is the smallest value recorded (exact), 0 when empty.
func (h *Histogram) Min() int64 {
	if h.n == 0 {
		return 0
	}
	return h.min
}

// Mean is the exact mean of the values recorded, 0 when empty.
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Quantile is the value below or at which a share q (0..1) of the values
// lie: the midpoint of the bucket that holds the ceil(q*n)-th smallest
// value, clamped to the exact minimum and maximum. 0 when empty.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	if q <= 0 {
		return h.min
	}
	if q >= 1 {
		return h.max
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := histBounds(i)
			v := lo + (hi-lo)/2
			return min(max(v, h.min), h.max)
		}
	}
	return h.max
}

// Percentiles is the summary the reports print, in nanoseconds.
type Percentiles struct {
	P50  int64 `json:"p50_ns"`
	P90  int64 `json:"p90_ns"`
	P99  int64 `json:"p99_ns"`
	P999 int64 `json:"p999_ns"`
	Max  int64 `json:"max_ns"`
}

// Summary is h's p50, p90, p99, p99.9 and max.
func (h *Histogram) Summary() Percentiles {
	return Percentiles{
		P50:  h.Quantile(0.50),
		P90:  h.Quantile(0.90),
		P99:  h.Quantile(0.99),
		P999: h.Quantile(0.999),
		Max:  h.Max(),
	}
}
