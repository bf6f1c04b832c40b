package bench

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// FreezeAt is the instant (Unix ms, 2030-01-01T00:00:00Z) at which the
// accuracy replay's clock starts, aligned to every window length used.
const FreezeAt = 1893456000000

// AccuracyOptions shape the synthetic traffic of the accuracy run.
type AccuracyOptions struct {
	Keys    int           // keys per pattern (default 40)
	Windows int           // windows of traffic per pattern (default 12)
	Limit   int64         // requests per window (default 100)
	Window  time.Duration // window length (default 1s)
	Seed    uint64
}

func (o *AccuracyOptions) defaults() {
	atLeast(&o.Keys, 2, 40)
	atLeast(&o.Windows, 2, 12)
	atLeast(&o.Limit, 1, 100)
	atLeast(&o.Window, time.Millisecond, time.Second)
}

// AccuracyPattern is the comparison on one kind of traffic.
type AccuracyPattern struct {
	Name          string  `json:"name"`
	About         string  `json:"about"`
	Requests      int64   `json:"requests"`
	Different     int64   `json:"different"`
	FalseAllow    int64   `json:"false_allow"` // the counter admitted what the log denied
	FalseDeny     int64   `json:"false_deny"`  // the counter denied what the log admitted
	LogDenied     int64   `json:"log_denied"`
	SlidingDenied int64   `json:"sliding_denied"`
	Share         float64 `json:"share"` // Different / Requests
	// Bands breaks the comparison down by the keys' rate against the limit.
	Bands map[string]BandCount `json:"bands"`
}

// count adds one request's two decisions, to a key of band bn.
func (p *AccuracyPattern) count(sliding, log bool, bn string) {
	b := p.Bands[bn]
	p.Bands[bn] = BandCount{b.Requests + 1, b.Different + b2i(sliding != log)}
	p.Requests, p.Different = p.Requests+1, p.Different+b2i(sliding != log)
	p.FalseAllow, p.FalseDeny = p.FalseAllow+b2i(sliding && !log), p.FalseDeny+b2i(log && !sliding)
	p.LogDenied, p.SlidingDenied = p.LogDenied+b2i(!log), p.SlidingDenied+b2i(!sliding)
	p.Share = float64(p.Different) / float64(p.Requests)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// AccuracyResult is the sliding window counter against the exact log.
type AccuracyResult struct {
	Options  AccuracyOptions   `json:"options"`
	Err      string            `json:"error,omitempty"`
	Patterns []AccuracyPattern `json:"patterns"`
	Total    AccuracyPattern   `json:"total"`
}

// Rows are the patterns, then their total.
func (a AccuracyResult) Rows() []AccuracyPattern { return append(slices.Clone(a.Patterns), a.Total) }

// Band is the share of the requests to the keys of a band decided
// differently.
func (p AccuracyPattern) Band(name string) float64 { return p.Bands[name].Share() }

// BandCount is the comparison on the requests to the keys of one band.
type BandCount struct {
	Requests  int64 `json:"requests"`
	Different int64 `json:"different"`
}

// Share is Different / Requests, 0 for none.
func (b BandCount) Share() float64 { return quot(float64(b.Different), float64(b.Requests)) }

// Rate bands of the accuracy breakdown, by a key's request rate against
// its limit: below 0.9x, 0.9x to 1.1x, above 1.1x.
const (
	BandUnder = "under"
	BandAt    = "at"
	BandOver  = "over"
)

func band(f float64) string {
	switch {
	case f < 0.9:
		return BandUnder
	case f <= 1.1:
		return BandAt
	}
	return BandOver
}

// rateFactor spreads the keys' request rates log-uniformly from 1/4 to 4
// times the limit, so that about half the keys stay under the limit and
// half exceed it, a few hovering at it.
func rateFactor(k, n int) float64 {
	return math.Pow(16, float64(k)/float64(n-1)) / 4
}

// arrival is one request: when (ms from the pattern's start) and to which key.
type arrival struct {
	at  int64
	key int
}

// TrafficPattern names a kind of synthetic traffic of the accuracy run.
type TrafficPattern struct{ Name, About string }

// AccuracyPatterns are the traffic patterns the accuracy run compares on.
func AccuracyPatterns() []TrafficPattern {
	return []TrafficPattern{
		{"steady", "evenly spaced requests"},
		{"edges", "bursts in the last and first tenth of each window"},
		{"random", "Poisson arrivals"},
	}
}

// AccuracyTraffic builds the arrivals of a pattern: "steady" (evenly
// spaced), "edges" (bursts just before and just after each window
// boundary: the case a window counter is known to get wrong) or "random"
// (Poisson). The result is sorted by time.
func AccuracyTraffic(pattern string, o AccuracyOptions) ([]arrival, error) {
	o.defaults()
	rng := rand.New(rand.NewPCG(o.Seed, uint64(len(pattern))))
	w := o.Window.Milliseconds()
	span := w * int64(o.Windows)
	var out []arrival
	for k := range o.Keys {
		perWindow := float64(o.Limit) * rateFactor(k, o.Keys)
		switch pattern {
		case "steady":
			gap := float64(w) / perWindow
			for t := rng.Float64() * gap; t < float64(span); t += gap {
				out = append(out, arrival{int64(t), k})
			}
		case "edges":
			edge := max(w/10, 1)
			for b := w; b < span; b += w { // each inner boundary
				for range int(math.Round(perWindow / 2)) {
					out = append(out, arrival{b - 1 - rng.Int64N(edge), k}, arrival{b + rng.Int64N(edge), k})
				}
			}
		case "random":
			rate := perWindow / float64(w) // per ms
			for t := rng.ExpFloat64() / rate; t < float64(span); t += rng.ExpFloat64() / rate {
				out = append(out, arrival{int64(t), k})
			}
		default:
			return nil, fmt.Errorf("unknown traffic pattern %q", pattern)
		}
	}
	slices.SortFunc(out, func(a, b arrival) int { return cmp.Or(cmp.Compare(a.at, b.at), a.key-b.key) })
	return out, nil
}

// Accuracy replays each pattern's arrivals on RL.SLIDING and RL.LOG keys
// with the same limit and window, in sluice's engine at the arrivals'
// times (what a sluice with its clock frozen and moved by DEBUG TIMEWARP
// decides), and counts the requests the two decide differently.
func Accuracy(o AccuracyOptions) AccuracyResult {
	o.defaults()
	res := AccuracyResult{Options: o, Total: AccuracyPattern{Name: "all", Bands: map[string]BandCount{}}}
	e := engine.New(engine.Config{})
	now := int64(FreezeAt) // the engine's clock, ms
	w := o.Window.Milliseconds()
	rule := func(k engine.Kind) engine.Rule { return engine.Rule{Kind: k, Limit: o.Limit, Period: int64(o.Window)} }
	ops, results := make([]engine.Op, 2), make([]engine.Result, 2)
	for _, p := range AccuracyPatterns() {
		arr, err := AccuracyTraffic(p.Name, o)
		if err != nil {
			res.Err = err.Error()
			return res
		}
		pr := AccuracyPattern{Name: p.Name, About: p.About, Bands: map[string]BandCount{}}
		start := (now/w + 2) * w // each pattern starts on a window boundary
		for _, a := range arr {
			now = start + a.at
			key := "acc:" + p.Name + ":" + strconv.Itoa(a.key)
			ops[0] = engine.Op{Code: engine.OpDecide, Rule: rule(engine.KindSliding), Key: []byte(key + ":s"), Cost: 1}
			ops[1] = engine.Op{Code: engine.OpDecide, Rule: rule(engine.KindLog), Key: []byte(key + ":l"), Cost: 1}
			e.Apply(now*int64(time.Millisecond), ops, results)
			if err := cmp.Or(results[0].Err, results[1].Err); err != nil {
				res.Err = fmt.Sprintf("%s: %v", p.Name, err)
				return res
			}
			bn := band(rateFactor(a.key, o.Keys))
			pr.count(results[0].Allowed, results[1].Allowed, bn)
			res.Total.count(results[0].Allowed, results[1].Allowed, bn)
		}
		res.Patterns = append(res.Patterns, pr)
	}
	return res
}
