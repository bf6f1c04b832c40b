package engine

import (
	"math"
	"math/bits"
)

// The bounds of a rule and a cost. The engine checks them (checkRule) on
// every path, replicated entries and snapshots included; the server checks
// the same bounds first, to name the argument at fault in its error.
const (
	// MaxCount is the largest limit, capacity or cost (and refund) of the
	// RL.* kinds: 2^53, so that counts stay exact in a float64 client.
	MaxCount = 1 << 53
	// MaxPeriodDays is the longest window, emission interval or lease TTL,
	// in days; it also bounds one step of the test clock (DEBUG TIMEWARP).
	MaxPeriodDays = 366
	// MaxPeriod is MaxPeriodDays in nanoseconds.
	MaxPeriod = MaxPeriodDays * 24 * 3600 * 1_000_000_000
	// MaxGCRASpan bounds CL.THROTTLE's burst times interval and quantity
	// times interval, in nanoseconds (2^62 ns, about 146 years).
	MaxGCRASpan = 1 << 62
)

// Bounds of the arithmetic. Every product that can exceed int64 is computed
// in 128 bits (math/bits) and every reply time saturates at maxReply.
const (
	nsPerMs = 1_000_000
	// maxReply is where reply times, in milliseconds, saturate (2^53).
	maxReply = int64(1) << 53
	// Short names of the exported bounds, used throughout the package.
	maxCount    = MaxCount
	maxPeriod   = MaxPeriod
	maxGCRASpan = MaxGCRASpan
)

// satAdd returns a+b, saturated to the int64 range.
func satAdd(a, b int64) int64 {
	c := a + b
	if (c > a) == (b > 0) {
		return c
	}
	if b > 0 {
		return math.MaxInt64
	}
	return math.MinInt64
}

// elapsed returns max(0, now-last), saturated.
func elapsed(now, last int64) int64 {
	if now <= last {
		return 0
	}
	if d := now - last; d > 0 {
		return d
	}
	return math.MaxInt64
}

// align returns the start of the epoch-aligned window of length w holding t.
func align(t, w int64) int64 {
	m := t % w
	if m < 0 {
		m += w
	}
	return t - m
}

// ceilMs converts nanoseconds to milliseconds, rounding up; 0 for ns <= 0,
// saturated at maxReply.
func ceilMs(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	ms := ns / nsPerMs
	if ns%nsPerMs != 0 {
		ms++
	}
	return min(ms, maxReply)
}

// ceilMsMulSub returns ceil((k*m - sub) / 1e6) for k*m >= sub, computed in
// 128 bits and saturated at maxReply.
func ceilMsMulSub(k, m, sub uint64) int64 {
	hi, lo := bits.Mul64(k, m)
	lo, borrow := bits.Sub64(lo, sub, 0)
	hi -= borrow
	if hi >= nsPerMs {
		return maxReply
	}
	var q, r uint64
	if hi == 0 { // the usual case: a division by a constant, no DIV
		q, r = lo/nsPerMs, lo%nsPerMs
	} else {
		q, r = bits.Div64(hi, lo, nsPerMs)
	}
	if q >= uint64(maxReply) {
		return maxReply
	}
	if r != 0 {
		q++
	}
	return int64(q)
}

// mulSubSat returns k*m - sub (k*m >= sub) in nanoseconds, saturated at
// math.MaxInt64.
func mulSubSat(k, m, sub uint64) int64 {
	hi, lo := bits.Mul64(k, m)
	lo, borrow := bits.Sub64(lo, sub, 0)
	hi -= borrow
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// mulDiv returns floor(a*b/c) for c > 0, computed in 128 bits; it saturates
// at math.MaxUint64 when the quotient does not fit.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi == 0 && c != 0 {
		return lo / c
	}
	if hi >= c {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// secsUp converts nanoseconds to redis-cell's whole seconds: the truncated
// milliseconds' seconds, plus one if a millisecond part remains; 0 for ns <= 0.
func secsUp(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	ms := ns / nsPerMs
	s := ms / 1000
	if ms%1000 != 0 {
		s++
	}
	return s
}
