package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// FreezeAt is the instant (Unix ms, 2030-01-01T00:00:00Z) at which the
// accuracy run freezes sluice's clock: in the future (freezing in the past
// is refused) and aligned to every window length used.
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

func (p *AccuracyPattern) add(q AccuracyPattern) {
	p.Requests += q.Requests
	p.Different += q.Different
	p.FalseAllow += q.FalseAllow
	p.FalseDeny += q.FalseDeny
	p.LogDenied += q.LogDenied
	p.SlidingDenied += q.SlidingDenied
	if p.Bands == nil {
		p.Bands = map[string]BandCount{}
	}
	for k, b := range q.Bands {
		c := p.Bands[k]
		c.Requests += b.Requests
		c.Different += b.Different
		p.Bands[k] = c
	}
	if p.Requests > 0 {
		p.Share = float64(p.Different) / float64(p.Requests)
	}
}

// AccuracyResult is the sliding window counter against the exact log.
type AccuracyResult struct {
	Options     AccuracyOptions   `json:"options"`
	Unavailable string            `json:"unavailable,omitempty"`
	Err         string            `json:"error,omitempty"`
	Patterns    []AccuracyPattern `json:"patterns"`
	Total       AccuracyPattern   `json:"total"`
}

// Rows are the patterns, then their total.
func (a AccuracyResult) Rows() []AccuracyPattern { return append(slices.Clone(a.Patterns), a.Total) }

// Band is the share of the requests to the keys of a band decided
// differently.
func (p AccuracyPattern) Band(name string) float64 { return p.Bands[name].Share() }

// arrival is one request: when (ms from the pattern's start) and to which key.
type arrival struct {
	at  int64
	key int
}

// rateFactor spreads the keys' request rates log-uniformly from 1/4 to 4
// times the limit, so that about half the keys stay under the limit and
// half exceed it, a few hovering at it.
func rateFactor(k, n int) float64 {
	return math.Pow(16, float64(k)/float64(n-1)) / 4
}

// Rate bands of the accuracy breakdown, by a key's request rate against its
// limit.
const (
	BandUnder = "under" // below 0.9x the limit
	BandAt    = "at"    // 0.9x to 1.1x
	BandOver  = "over"  // above 1.1x
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

// BandCount is the comparison on the requests to the keys of one band.
type BandCount struct {
	Requests  int64 `json:"requests"`
	Different int64 `json:"different"`
}

// Share is Different / Requests, 0 for none.
func (b BandCount) Share() float64 {
	if b.Requests == 0 {
		return 0
	}
	return float64(b.Different) / float64(b.Requests)
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
		f := rateFactor(k, o.Keys)
		perWindow := float64(o.Limit) * f
		switch pattern {
		case "steady":
			gap := float64(w) / perWindow
			phase := rng.Float64() * gap
			for t := phase; t < float64(span); t += gap {
				out = append(out, arrival{int64(t), k})
			}
		case "edges":
			edge := max(w/10, 1)
			for b := w; b < span; b += w { // each inner boundary
				n := int(math.Round(perWindow / 2))
				for range n {
					out = append(out, arrival{b - 1 - rng.Int64N(edge), k})
					out = append(out, arrival{b + rng.Int64N(edge), k})
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
	slices.SortStableFunc(out, func(a, b arrival) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return a.key - b.key
	})
	return out, nil
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

// Accuracy starts a sluice with --enable-debug-command, freezes its clock
// and replays each pattern's arrivals on RL.SLIDING and RL.LOG keys with
// the same limit and window, moving the clock with DEBUG TIMEWARP, and
// counts the requests the two decide differently.
func (r *Runner) Accuracy(ctx context.Context, o AccuracyOptions) AccuracyResult {
	o.defaults()
	res := AccuracyResult{Options: o}
	r.Progress.Step("accuracy: start sluice with --enable-debug-command", time.Second)
	t, err := StartTarget(ctx, r.Env.Config(), TargetSluiceMem, StartOptions{Debug: true})
	if err != nil {
		res.Unavailable = err.Error()
		r.Progress.Finish("unavailable: " + shorten(err.Error(), 80))
		return res
	}
	defer t.Stop()
	r.Progress.Finish("ok")
	c, err := dial(t.Addrs[0])
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer c.Close()
	if err := do(c, "DEBUG", "CLOCK", "FREEZE", strconv.FormatInt(FreezeAt, 10)); err != nil {
		res.Err = fmt.Sprintf("DEBUG CLOCK FREEZE: %v", err)
		return res
	}
	now := int64(FreezeAt) // the server's clock, ms
	for _, p := range AccuracyPatterns() {
		r.Progress.Step("accuracy: "+p.Name, 3*time.Second)
		arr, err := AccuracyTraffic(p.Name, o)
		if err != nil {
			res.Err = err.Error()
			return res
		}
		// start each pattern on a window boundary
		w := o.Window.Milliseconds()
		start := (now/w + 2) * w
		pr, err := replay(ctx, c, p.Name, arr, o, &now, start)
		if err != nil {
			res.Err = fmt.Sprintf("%s: %v", p.Name, err)
			r.Progress.Finish("failed: " + shorten(err.Error(), 80))
			return res
		}
		pr.About = p.About
		res.Patterns = append(res.Patterns, pr)
		res.Total.add(pr)
		r.Progress.Finish(fmt.Sprintf("%d of %d decided differently (%.3f%%)", pr.Different, pr.Requests, pr.Share*100))
	}
	res.Total.Name = "all"
	return res
}

// replay sends the arrivals, one round trip to move the clock and one for
// the requests of each distinct instant.
func replay(ctx context.Context, c *respwire.Conn, name string, arr []arrival, o AccuracyOptions, now *int64, start int64) (AccuracyPattern, error) {
	pr := AccuracyPattern{Name: name, Bands: map[string]BandCount{}}
	limit := strconv.FormatInt(o.Limit, 10)
	window := strconv.FormatInt(o.Window.Milliseconds(), 10) + "ms"
	skey := func(k int) string { return fmt.Sprintf("acc:%s:s:%d", name, k) }
	lkey := func(k int) string { return fmt.Sprintf("acc:%s:l:%d", name, k) }
	for i := 0; i < len(arr); {
		if err := ctx.Err(); err != nil {
			return pr, err
		}
		at := start + arr[i].at
		if at > *now {
			if err := do(c, "DEBUG", "TIMEWARP", strconv.FormatInt(at-*now, 10)); err != nil {
				return pr, fmt.Errorf("DEBUG TIMEWARP: %w", err)
			}
			*now = at
		}
		j := i
		for ; j < len(arr) && start+arr[j].at == at; j++ {
			c.Append("RL.SLIDING", skey(arr[j].key), limit, window)
			c.Append("RL.LOG", lkey(arr[j].key), limit, window)
		}
		if err := c.Flush(); err != nil {
			return pr, err
		}
		for ; i < j; i++ {
			s, err := readAllowed(c)
			if err != nil {
				return pr, fmt.Errorf("RL.SLIDING: %w", err)
			}
			l, err := readAllowed(c)
			if err != nil {
				return pr, fmt.Errorf("RL.LOG: %w", err)
			}
			pr.Requests++
			bn := band(rateFactor(arr[i].key, o.Keys))
			bc := pr.Bands[bn]
			bc.Requests++
			if s != l {
				bc.Different++
			}
			pr.Bands[bn] = bc
			if !l {
				pr.LogDenied++
			}
			if !s {
				pr.SlidingDenied++
			}
			switch {
			case s && !l:
				pr.FalseAllow++
				pr.Different++
			case !s && l:
				pr.FalseDeny++
				pr.Different++
			}
		}
	}
	if pr.Requests > 0 {
		pr.Share = float64(pr.Different) / float64(pr.Requests)
	}
	return pr, nil
}

// do runs one command on c; an error reply is an error.
func do(c *respwire.Conn, args ...string) error {
	v, err := c.Do(time.Minute, args...)
	if err == nil && v.Error() != "" {
		err = errors.New(v.Error())
	}
	return err
}

func readAllowed(c *respwire.Conn) (bool, error) {
	v, err := c.ReadReply()
	if err != nil {
		return false, err
	}
	ints, ok := v.Ints()
	if !ok || len(ints) != 5 {
		return false, errors.New("want a reply of 5 integers, got " + v.String())
	}
	return ints[0] == 1, nil
}
