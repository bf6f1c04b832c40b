package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// Case is one workload run against several targets in interleaved rounds:
// round 1 runs every target once, in order, then round 2, and so on (A B A
// B), so that a noisy neighbour on the machine affects every target alike.
// The reported figures are the medians over the rounds.
type Case struct {
	Section  string      `json:"-"` // the suite section it belongs to
	ID       string      `json:"id"`
	Title    string      `json:"title"`
	Workload Workload    `json:"workload"`
	Load     LoadOptions `json:"-"` // Addrs is filled per target
	Conns    int         `json:"conns"`
	Pipeline int         `json:"pipeline"`
	Targets  []string    `json:"targets"`
	Rounds   int         `json:"rounds"`
	Baseline string      `json:"baseline"` // the target the ratios are taken against
	Goals    []Goal      `json:"goals,omitempty"`
}

// Goal is a ratio a measurement must reach: Target's median throughput
// over the case's baseline's (a case's goals), or the figure its section
// says (MemoryGoal, ScaleGoal). Min and Max bound it (0: no bound).
type Goal struct {
	Target string  `json:"target"`
	About  string  `json:"about"`
	Min    float64 `json:"min,omitempty"`
	Max    float64 `json:"max,omitempty"`
}

// TargetRun is one target's rounds of a case.
type TargetRun struct {
	Target      string       `json:"target"`
	Unavailable string       `json:"unavailable,omitempty"`
	Err         string       `json:"error,omitempty"`
	Rounds      []LoadResult `json:"rounds"`
	Median      LoadResult   `json:"median"`
}

// OK reports whether the run has a figure to show.
func (r TargetRun) OK() bool { return r.Unavailable == "" && len(r.Rounds) > 0 }

// CaseResult is a case with its runs, in the case's target order.
type CaseResult struct {
	Case Case        `json:"case"`
	Runs []TargetRun `json:"runs"`
}

// Run is the run of a target, or nil.
func (cr CaseResult) Run(target string) *TargetRun {
	if i := slices.IndexFunc(cr.Runs, func(r TargetRun) bool { return r.Target == target }); i >= 0 {
		return &cr.Runs[i]
	}
	return nil
}

// Ratio is target's median throughput over the baseline's, 0 when either
// is missing.
func (cr CaseResult) Ratio(target string) float64 {
	a, b := cr.Run(target), cr.Run(cr.Case.Baseline)
	if a == nil || b == nil || !a.OK() || !b.OK() || b.Median.Throughput == 0 {
		return 0
	}
	return a.Median.Throughput / b.Median.Throughput
}

// Runner runs cases on the targets of an Env, printing a line per step to
// Progress (nil: none).
type Runner struct {
	Env      *Env
	Progress io.Writer
	started  time.Time
}

// note prints the line of a step that ended: its name and its result, a
// text, an error (it failed) or a run's LoadResult.
func (r *Runner) note(step string, result any) {
	if r.Progress == nil {
		return
	}
	if r.started.IsZero() {
		r.started = time.Now()
	}
	switch v := result.(type) {
	case error:
		result = "failed: " + shorten(v.Error(), 80)
	case LoadResult:
		result = fmt.Sprintf("%s/s p99 %s", FormatCount(v.Throughput), FormatNs(v.Latency.P99))
		if v.Errors > 0 {
			result = fmt.Sprintf("%s (%d errors: %s)", result, v.Errors, shorten(v.FirstError, 60))
		}
	}
	fmt.Fprintf(r.Progress, "[%s] %s: %v\n", time.Since(r.started).Round(time.Second), step, result)
}

// RunCase runs c; a target that cannot start or fails is reported in its
// TargetRun, never as an error: only a cancelled context stops the case.
func (r *Runner) RunCase(ctx context.Context, c Case) (CaseResult, error) {
	c.Rounds = max(c.Rounds, 1)
	c.Conns, c.Pipeline = c.Load.Conns, c.Load.Pipeline
	if err := c.Workload.Validate(); err != nil {
		return CaseResult{}, fmt.Errorf("case %s: %w", c.ID, err)
	}
	res := CaseResult{Case: c, Runs: make([]TargetRun, len(c.Targets))}
	for round := range c.Rounds {
		for i, name := range c.Targets {
			run, step := &res.Runs[i], fmt.Sprintf("%s: %s round %d/%d", c.ID, name, round+1, c.Rounds)
			run.Target = name
			if run.Unavailable != "" || run.Err != "" {
				r.note(step, "skipped")
				continue
			}
			t, err := r.Env.Get(ctx, name)
			if err == nil {
				_, err = t.Dialect.Template(c.Workload.Alg, c.Workload.Allow)
			}
			if err != nil {
				run.Unavailable = err.Error()
				r.note(step, "unavailable: "+shorten(err.Error(), 80))
				continue
			}
			var lr LoadResult
			if _, err = t.Do(ctx, "FLUSHALL"); err != nil {
				err = fmt.Errorf("%s: FLUSHALL: %w", name, err)
			} else {
				lr, err = t.load(ctx, c.Workload, c.Load, uint64(round+1))
			}
			if err != nil {
				run.Err = err.Error()
				r.note(step, err)
			} else {
				run.Rounds = append(run.Rounds, lr)
				r.note(step, lr)
			}
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
		}
	}
	for i := range res.Runs {
		if len(res.Runs[i].Rounds) > 0 {
			res.Runs[i].Median = MedianResult(res.Runs[i].Rounds)
		}
	}
	return res, nil
}

// load runs w on t with o, its addresses, counters and seed filled in; a
// failed run whose target has exited says so.
func (t *Target) load(ctx context.Context, w Workload, o LoadOptions, seed uint64) (LoadResult, error) {
	o.Addrs, o.Counters, o.Seed = t.Addrs, t.counters, seed
	lr, err := RunLoad(ctx, w, t.Dialect, o)
	if err != nil && t.Alive() != nil {
		return lr, t.Alive()
	}
	return lr, err
}

// MedianResult reduces rounds to one: for each figure (throughput, each
// latency percentile, CPU and group commit figures) the median over the
// rounds; counts are summed.
func MedianResult(rounds []LoadResult) LoadResult {
	var m LoadResult
	pick := func(f func(LoadResult) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = f(r)
		}
		return Median(v)
	}
	m.Throughput = pick(func(r LoadResult) float64 { return r.Throughput })
	m.ServerCPU = pick(func(r LoadResult) float64 { return r.ServerCPU })
	m.ClientCPU = pick(func(r LoadResult) float64 { return r.ClientCPU })
	m.OpsPerEntry = pick(func(r LoadResult) float64 { return r.OpsPerEntry })
	m.CommitTime = pick(func(r LoadResult) float64 { return r.CommitTime })
	m.HoldTime = pick(func(r LoadResult) float64 { return r.HoldTime })
	ns := func(f func(Percentiles) int64) int64 {
		return int64(pick(func(r LoadResult) float64 { return float64(f(r.Latency)) }))
	}
	m.Latency = Percentiles{P50: ns(func(p Percentiles) int64 { return p.P50 }), P90: ns(func(p Percentiles) int64 { return p.P90 }),
		P99: ns(func(p Percentiles) int64 { return p.P99 }), P999: ns(func(p Percentiles) int64 { return p.P999 }), Max: ns(func(p Percentiles) int64 { return p.Max })}
	for _, r := range rounds {
		m.Requests, m.Allowed, m.Denied, m.Errors, m.Elapsed = m.Requests+r.Requests, m.Allowed+r.Allowed, m.Denied+r.Denied, m.Errors+r.Errors, m.Elapsed+r.Elapsed
		if m.FirstError == "" {
			m.FirstError = r.FirstError
		}
	}
	return m
}

// Median is the median of v (the mean of the middle two for an even
// count), 0 for none.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// FormatCount prints a rate or count with k or M.
func FormatCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// FormatNs prints a duration in nanoseconds as µs or ms.
func FormatNs(ns int64) string {
	switch {
	case ns >= 10_000_000:
		return fmt.Sprintf("%.0fms", float64(ns)/1e6)
	case ns >= 1_000_000:
		return fmt.Sprintf("%.1fms", float64(ns)/1e6)
	case ns >= 1000:
		return fmt.Sprintf("%.0fµs", float64(ns)/1e3)
	}
	return fmt.Sprintf("%dns", ns)
}
