package engine

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkSlidingAccuracy: the sliding window counter against the exact
// log. The same synthetic arrivals go to an RL.SLIDING key and an RL.LOG
// key with the same limit and window, decided at the arrivals' instants
// (what a server whose clock is frozen by DEBUG CLOCK FREEZE and moved by
// DEBUG TIMEWARP decides), and the requests the two decide differently
// are counted, by traffic pattern (steady, edges, random) and over all of
// them (all), broken down by the keys' rate against the limit. One op is
// one replay on a fresh engine; the figures are the same for every op.
// The benchmark page (bench/benchmarks.md.tmpl) shows them.
func BenchmarkSlidingAccuracy(b *testing.B) {
	o := accDefaults()
	for _, pats := range append([][]string{{"steady"}, {"edges"}, {"random"}}, accPatterns()) {
		name := pats[0]
		if len(pats) > 1 {
			name = "all"
		}
		b.Run(name, func(b *testing.B) {
			var t accTally
			for range b.N {
				t = accReplay(b, pats, o)
			}
			t.report(b)
		})
	}
}

// accOptions shape the synthetic traffic of the accuracy replay.
type accOptions struct {
	keys    int           // keys per pattern
	windows int           // windows of traffic per pattern
	limit   int64         // requests per window
	window  time.Duration // window length
	seed    uint64
}

// accDefaults are the options of BenchmarkSlidingAccuracy.
func accDefaults() accOptions {
	return accOptions{keys: 40, windows: 12, limit: 100, window: time.Second}
}

// accFreezeAt is the instant (Unix ms, 2030-01-01T00:00:00Z) at which the
// replay's clock starts, aligned to every window length used.
const accFreezeAt = 1893456000000

// accPatterns are the traffic patterns the replay compares on.
func accPatterns() []string { return []string{"steady", "edges", "random"} }

// Rate bands of the breakdown, by a key's request rate against its limit:
// below 0.9x, 0.9x to 1.1x, above 1.1x.
const (
	bandUnder = iota
	bandAt
	bandOver
)

func accBand(f float64) int {
	switch {
	case f < 0.9:
		return bandUnder
	case f <= 1.1:
		return bandAt
	}
	return bandOver
}

// accRateFactor spreads the keys' request rates log-uniformly from 1/4 to
// 4 times the limit, so that about half the keys stay under the limit and
// half exceed it, a few hovering at it.
func accRateFactor(k, n int) float64 {
	return math.Pow(16, float64(k)/float64(n-1)) / 4
}

// accTally is the comparison on some traffic.
type accTally struct {
	requests, different int64
	falseAllow          int64 // the counter admitted what the log denied
	falseDeny           int64 // the counter denied what the log admitted
	logDenied           int64
	bands               [3]struct{ requests, different int64 }
}

// count adds one request's two decisions, to a key of band bn.
func (t *accTally) count(sliding, log bool, bn int) {
	d := b2i(sliding != log)
	t.bands[bn].requests, t.bands[bn].different = t.bands[bn].requests+1, t.bands[bn].different+d
	t.requests, t.different = t.requests+1, t.different+d
	t.falseAllow, t.falseDeny = t.falseAllow+b2i(sliding && !log), t.falseDeny+b2i(log && !sliding)
	t.logDenied += b2i(!log)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// pct is 100 * a / b, 0 for b = 0.
func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// report reports t's figures: the page (bench/report.go) reads these units.
func (t accTally) report(b *testing.B) {
	b.ReportMetric(float64(t.requests), "requests")
	b.ReportMetric(pct(t.different, t.requests), "differ-%")
	b.ReportMetric(float64(t.falseAllow), "false-allows")
	b.ReportMetric(float64(t.falseDeny), "false-denies")
	for i, unit := range []string{"under-differ-%", "at-differ-%", "over-differ-%"} {
		b.ReportMetric(pct(t.bands[i].different, t.bands[i].requests), unit)
	}
}

// accArrival is one request: when (ms from the pattern's start) and to
// which key.
type accArrival struct {
	at  int64
	key int
}

// accTraffic builds the arrivals of a pattern: "steady" (evenly spaced
// requests), "edges" (bursts in the last and first tenth of each window:
// the case a window counter is known to get wrong) or "random" (Poisson
// arrivals). The result is sorted by time.
func accTraffic(pattern string, o accOptions) ([]accArrival, error) {
	rng := rand.New(rand.NewPCG(o.seed, uint64(len(pattern))))
	w := o.window.Milliseconds()
	span := w * int64(o.windows)
	var out []accArrival
	for k := range o.keys {
		perWindow := float64(o.limit) * accRateFactor(k, o.keys)
		switch pattern {
		case "steady":
			gap := float64(w) / perWindow
			for t := rng.Float64() * gap; t < float64(span); t += gap {
				out = append(out, accArrival{int64(t), k})
			}
		case "edges":
			edge := max(w/10, 1)
			for b := w; b < span; b += w { // each inner boundary
				for range int(math.Round(perWindow / 2)) {
					out = append(out, accArrival{b - 1 - rng.Int64N(edge), k}, accArrival{b + rng.Int64N(edge), k})
				}
			}
		case "random":
			rate := perWindow / float64(w) // per ms
			for t := rng.ExpFloat64() / rate; t < float64(span); t += rng.ExpFloat64() / rate {
				out = append(out, accArrival{int64(t), k})
			}
		default:
			return nil, fmt.Errorf("unknown traffic pattern %q", pattern)
		}
	}
	slices.SortFunc(out, func(a, b accArrival) int { return cmp.Or(cmp.Compare(a.at, b.at), a.key-b.key) })
	return out, nil
}

// accReplay replays the patterns' arrivals one after the other on a fresh
// engine, each starting on a window boundary, and tallies the decisions of
// RL.SLIDING and RL.LOG keys with the same limit and window.
func accReplay(tb testing.TB, patterns []string, o accOptions) accTally {
	var t accTally
	e := New(Config{})
	now := int64(accFreezeAt) // the engine's clock, ms
	w := o.window.Milliseconds()
	rule := func(k Kind) Rule { return Rule{Kind: k, Limit: o.limit, Period: int64(o.window)} }
	ops, results := make([]Op, 2), make([]Result, 2)
	for _, p := range patterns {
		arr, err := accTraffic(p, o)
		if err != nil {
			tb.Fatal(err)
		}
		keys := make([][2][]byte, o.keys)
		for k := range keys {
			key := "acc:" + p + ":" + strconv.Itoa(k)
			keys[k] = [2][]byte{[]byte(key + ":s"), []byte(key + ":l")}
		}
		start := (now/w + 2) * w // each pattern starts on a window boundary
		for _, a := range arr {
			now = start + a.at
			ops[0] = Op{Code: OpDecide, Rule: rule(KindSliding), Key: keys[a.key][0], Cost: 1}
			ops[1] = Op{Code: OpDecide, Rule: rule(KindLog), Key: keys[a.key][1], Cost: 1}
			e.Apply(now*int64(time.Millisecond), ops, results)
			if err := cmp.Or(results[0].Err, results[1].Err); err != nil {
				tb.Fatalf("%s: %v", p, err)
			}
			t.count(results[0].Allowed, results[1].Allowed, accBand(accRateFactor(a.key, o.keys)))
		}
	}
	return t
}

// TestSlidingAccuracy: the replay is deterministic, keys under the limit
// with evenly spaced requests are decided alike by the counter and the
// log, and the figures of the default options are those
// BenchmarkSlidingAccuracy reports and docs/benchmarks.md shows (measured
// first on a server whose clock was frozen and moved by DEBUG TIMEWARP:
// the engine decides the same at the same instants).
func TestSlidingAccuracy(t *testing.T) {
	small := accOptions{keys: 4, windows: 3, limit: 10, window: time.Second, seed: 1}
	t.Run("small", func(t *testing.T) {
		a, b := accReplay(t, accPatterns(), small), accReplay(t, accPatterns(), small)
		if a.requests == 0 {
			t.Fatalf("accuracy: %+v", a)
		}
		if a != b {
			t.Errorf("accuracy not deterministic: %+v then %+v", a, b)
		}
		if u := accReplay(t, []string{"steady"}, small).bands[bandUnder]; u.requests == 0 || u.different != 0 {
			t.Errorf("steady traffic under the limit decided differently: %+v", u)
		}
		if a.logDenied == 0 {
			t.Error("no request over the limit was denied by the log")
		}
	})
	for _, tc := range []struct {
		name                               string
		patterns                           []string
		requests, falseAllows, falseDenies int64
	}{
		{"steady", []string{"steady"}, 65875, 10243, 10244},
		{"edges", []string{"edges"}, 60324, 5978, 7142},
		{"random", []string{"random"}, 65646, 9132, 9022},
		{"all", accPatterns(), 191845, 25353, 26408},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := accReplay(t, tc.patterns, accDefaults())
			if p.requests != tc.requests || p.falseAllow != tc.falseAllows || p.falseDeny != tc.falseDenies {
				t.Errorf("%d requests, %d false allows, %d false denies; want %d, %d, %d",
					p.requests, p.falseAllow, p.falseDeny, tc.requests, tc.falseAllows, tc.falseDenies)
			}
		})
	}
}

// TestSlidingAccuracyTraffic: each pattern's arrivals are deterministic,
// sorted and within the replay's keys and windows, and have the pattern's
// shape.
func TestSlidingAccuracyTraffic(t *testing.T) {
	o := accOptions{keys: 4, windows: 3, limit: 10, window: time.Second, seed: 1}
	for _, tc := range []struct {
		pattern string
		check   func(t *testing.T, a []accArrival)
	}{
		{"steady", func(t *testing.T, a []accArrival) {
			perKey := map[int]int{}
			for _, e := range a {
				perKey[e.key]++
			}
			// rates from 1/4 to 4 times the limit of 10 per window, over 3 windows
			if perKey[0] < 6 || perKey[0] > 9 || perKey[3] < 119 || perKey[3] > 121 {
				t.Errorf("steady arrivals per key %v", perKey)
			}
		}},
		{"edges", func(t *testing.T, a []accArrival) {
			for _, e := range a {
				if m := e.at % 1000; m >= 100 && m < 900 {
					t.Fatalf("edge burst at %d ms, not near a boundary", e.at)
				}
			}
		}},
		{"random", func(*testing.T, []accArrival) {}},
	} {
		t.Run(tc.pattern, func(t *testing.T) {
			a, err := accTraffic(tc.pattern, o)
			if err != nil {
				t.Fatal(err)
			}
			if len(a) == 0 {
				t.Fatalf("%s: no arrivals", tc.pattern)
			}
			for i := range a {
				if a[i].at < 0 || a[i].at >= 3000 || a[i].key < 0 || a[i].key >= 4 {
					t.Fatalf("%s: arrival %+v out of range", tc.pattern, a[i])
				}
				if i > 0 && a[i].at < a[i-1].at {
					t.Fatalf("%s: not sorted at %d", tc.pattern, i)
				}
			}
			if b, _ := accTraffic(tc.pattern, o); !slices.Equal(a, b) {
				t.Fatalf("%s: not deterministic", tc.pattern)
			}
			tc.check(t, a)
		})
	}
	if _, err := accTraffic("nope", o); err == nil {
		t.Error("unknown pattern accepted")
	}
	if accBand(0.5) != bandUnder || accBand(1) != bandAt || accBand(2) != bandOver {
		t.Error("bands")
	}
}
