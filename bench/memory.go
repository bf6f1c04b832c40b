package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MemoryParams are the limits of the keys created to measure memory: token
// buckets of 2^40 refilled at one token an hour, so that every key stays
// live (not back at its initial state) for an hour after it is touched.
func MemoryParams() Params {
	return Params{Limit: 1 << 40, RateN: 1, Period: time.Hour, Cost: 1}
}

// MemoryKeyPrefix names the keys of memory runs: "tb:" and 12 digits, as in
// the anchor measurement.
const MemoryKeyPrefix = "tb:"

// MemoryPoint is a target's memory, and optionally its throughput, with a
// number of live keys.
type MemoryPoint struct {
	Keys       uint64      `json:"keys"`
	RSS        int64       `json:"rss_bytes"`
	BaseRSS    int64       `json:"base_rss_bytes"` // with no keys, just after start
	PerKey     float64     `json:"rss_per_key"`    // (RSS - BaseRSS) / Keys
	UsedMemory int64       `json:"used_memory"`    // INFO memory used_memory, -1 if absent
	DBSize     int64       `json:"dbsize"`
	Throughput float64     `json:"throughput,omitempty"`
	Latency    Percentiles `json:"latency,omitzero"`
}

// MemorySeries is one target's points.
type MemorySeries struct {
	Target      string        `json:"target"`
	Unavailable string        `json:"unavailable,omitempty"`
	Err         string        `json:"error,omitempty"`
	Points      []MemoryPoint `json:"points"`
	Scale       *ScaleResult  `json:"scale,omitempty"`
}

// ScaleResult compares throughput with many keys and with few, measured in
// interleaved rounds on two instances that run side by side: the sweep's
// instance holding Large keys, and a fresh one holding Small keys.
type ScaleResult struct {
	SmallKeys uint64     `json:"small_keys"`
	LargeKeys uint64     `json:"large_keys"`
	Rounds    int        `json:"rounds"`
	Small     LoadResult `json:"small"`
	Large     LoadResult `json:"large"`
	Ratio     float64    `json:"ratio"` // Large over Small throughput
	Err       string     `json:"error,omitempty"`
}

// Last is the last point, or a zero point.
func (s MemorySeries) Last() MemoryPoint {
	if len(s.Points) == 0 {
		return MemoryPoint{}
	}
	return s.Points[len(s.Points)-1]
}

// At is the point with keys k, if any.
func (s MemorySeries) At(k uint64) (MemoryPoint, bool) {
	for _, p := range s.Points {
		if p.Keys == k {
			return p, true
		}
	}
	return MemoryPoint{}, false
}

// infoField reads a numeric field of INFO section; -1 when absent.
func infoField(ctx context.Context, t *Target, section, field string) int64 {
	v, err := t.Do(ctx, "INFO", section)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(v.Str, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(rest, 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// dbsize is the target's DBSIZE, -1 on error.
func dbsize(ctx context.Context, t *Target) int64 {
	v, err := t.Do(ctx, "DBSIZE")
	if err != nil {
		return -1
	}
	return v.Int
}

// memoryPoint reads the target's memory now.
func memoryPoint(ctx context.Context, t *Target, keys uint64, base int64) (MemoryPoint, error) {
	// let a server's allocator settle after the burst of writes
	time.Sleep(300 * time.Millisecond)
	rss, err := t.RSS()
	if err != nil {
		return MemoryPoint{}, err
	}
	p := MemoryPoint{Keys: keys, RSS: rss, BaseRSS: base, DBSize: dbsize(ctx, t),
		UsedMemory: infoField(ctx, t, "memory", "used_memory")}
	if keys > 0 {
		p.PerKey = float64(rss-base) / float64(keys)
	}
	return p, nil
}

// SweepOptions say how to measure memory and throughput against key count.
type SweepOptions struct {
	Targets []string
	Counts  []uint64    // increasing key counts, e.g. 1k, 10k, ..., 1M
	Load    LoadOptions // the throughput run at each count; Duration 0 skips it
	Rounds  int
	// ScaleTargets, with ScaleRounds > 0, are compared at the largest and
	// the smallest count in interleaved rounds of ScaleLoad once the sweep
	// is done (see ScaleResult).
	ScaleTargets []string
	ScaleRounds  int
	ScaleLoad    LoadOptions
}

// Sweep starts a fresh instance of each target, then for each count: adds
// live keys up to the count (token buckets named "tb:" + 12 digits), reads
// the RSS, and (if Load has a duration) measures token-bucket throughput
// with uniform keys over the keys that exist, targets interleaved per
// round. Memory is read right after adding keys, before the load.
func (r *Runner) Sweep(ctx context.Context, o SweepOptions) ([]MemorySeries, error) {
	cfg := r.Env.Config()
	series := make([]MemorySeries, len(o.Targets))
	targets := make([]*Target, len(o.Targets))
	defer func() {
		for _, t := range targets {
			if t != nil {
				t.Stop()
			}
		}
	}()
	// failed records err as target i's failure, or returns the context's
	// error when the sweep was cancelled.
	failed := func(i int, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		series[i].Err = err.Error()
		r.Progress.Finish("failed: " + shorten(err.Error(), 80))
		return nil
	}
	bases := make([]int64, len(o.Targets))
	for i, name := range o.Targets {
		series[i].Target = name
		r.Progress.Step(fmt.Sprintf("memory: start %s", name), time.Second)
		t, err := StartTarget(ctx, cfg, name, StartOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return series, ctx.Err()
			}
			series[i].Unavailable = err.Error()
			r.Progress.Finish("unavailable: " + shorten(err.Error(), 80))
			continue
		}
		targets[i] = t
		time.Sleep(300 * time.Millisecond)
		if bases[i], err = t.RSS(); err != nil {
			series[i].Err = err.Error()
		}
		r.Progress.Finish(fmt.Sprintf("RSS %s", FormatBytes(bases[i])))
	}
	w := Workload{Alg: AlgToken, Dist: DistUniform, Cost: 1, Prefix: MemoryKeyPrefix,
		Allow: MemoryParams(), Deny: MemoryParams()}
	have := make([]uint64, len(o.Targets))
	for _, n := range o.Counts {
		for i, t := range targets {
			if t == nil || series[i].Err != "" {
				continue
			}
			r.Progress.Step(fmt.Sprintf("memory: %s keys on %s", FormatCount(float64(n)), t.Name), populateEstimate(n-have[i]))
			tpl, err := t.Dialect.Template(AlgToken, MemoryParams())
			if err == nil {
				err = Populate(ctx, t.Addrs, tpl, MemoryKeyPrefix, have[i], n, 8)
			}
			var p MemoryPoint
			if err == nil {
				p, err = memoryPoint(ctx, t, n, bases[i])
			}
			if err != nil {
				if err := failed(i, err); err != nil {
					return series, err
				}
				continue
			}
			have[i] = n
			series[i].Points = append(series[i].Points, p)
			r.Progress.Finish(fmt.Sprintf("RSS %s, %.0f B/key, dbsize %d", FormatBytes(p.RSS), p.PerKey, p.DBSize))
		}
		if o.Load.Duration <= 0 {
			continue
		}
		w.Keys = n
		runs := make([][]LoadResult, len(targets))
		for round := range max(o.Rounds, 1) {
			for i, t := range targets {
				if t == nil || series[i].Err != "" || have[i] != n {
					continue
				}
				r.Progress.Step(fmt.Sprintf("keys=%s: %s round %d", FormatCount(float64(n)), t.Name, round+1), o.Load.Duration+o.Load.Warmup)
				lo := o.Load
				lo.Addrs, lo.Seed, lo.ServerPIDs = t.Addrs, uint64(round+1), t.PIDs()
				lr, err := RunLoad(ctx, w, t.Dialect, lo)
				if err != nil {
					if err := failed(i, err); err != nil {
						return series, err
					}
					continue
				}
				runs[i] = append(runs[i], lr)
				r.Progress.Finish(fmt.Sprintf("%s/s p99 %s", FormatCount(lr.Throughput), FormatNs(lr.Latency.P99)))
			}
		}
		for i := range targets {
			if len(runs[i]) > 0 && len(series[i].Points) > 0 {
				m := MedianResult(runs[i])
				last := &series[i].Points[len(series[i].Points)-1]
				last.Throughput, last.Latency = m.Throughput, m.Latency
			}
		}
	}
	for i, t := range targets {
		if t == nil || series[i].Err != "" || o.ScaleRounds < 1 || !slices.Contains(o.ScaleTargets, t.Name) || len(o.Counts) < 2 {
			continue
		}
		sr, err := r.scale(ctx, t, w, o.Counts[0], have[i], o)
		if err != nil && ctx.Err() != nil {
			return series, ctx.Err()
		}
		series[i].Scale = sr
	}
	return series, nil
}

// scale runs the ScaleResult comparison for target t, which holds large keys.
func (r *Runner) scale(ctx context.Context, t *Target, w Workload, small, large uint64, o SweepOptions) (*ScaleResult, error) {
	sr := &ScaleResult{SmallKeys: small, LargeKeys: large, Rounds: o.ScaleRounds}
	r.Progress.Step(fmt.Sprintf("scale: start a second %s with %s keys", t.Name, FormatCount(float64(small))), time.Second)
	st, err := StartTarget(ctx, r.Env.Config(), t.Name, StartOptions{})
	if err == nil {
		defer st.Stop()
		var tpl Template
		tpl, err = st.Dialect.Template(AlgToken, MemoryParams())
		if err == nil {
			err = Populate(ctx, st.Addrs, tpl, MemoryKeyPrefix, 0, small, 8)
		}
	}
	if err != nil {
		sr.Err = err.Error()
		r.Progress.Finish("failed: " + shorten(sr.Err, 80))
		return sr, err
	}
	r.Progress.Finish("ok")
	var smallRuns, largeRuns []LoadResult
	for round := range o.ScaleRounds {
		for _, side := range []struct {
			t    *Target
			keys uint64
			runs *[]LoadResult
		}{{st, small, &smallRuns}, {t, large, &largeRuns}} {
			r.Progress.Step(fmt.Sprintf("scale: %s keys round %d/%d", FormatCount(float64(side.keys)), round+1, o.ScaleRounds), o.ScaleLoad.Duration+o.ScaleLoad.Warmup)
			lo := o.ScaleLoad
			lo.Addrs, lo.Seed, lo.ServerPIDs = side.t.Addrs, uint64(round+1), side.t.PIDs()
			w.Keys = side.keys
			lr, err := RunLoad(ctx, w, side.t.Dialect, lo)
			if err != nil {
				sr.Err = err.Error()
				r.Progress.Finish("failed: " + shorten(sr.Err, 80))
				return sr, err
			}
			*side.runs = append(*side.runs, lr)
			r.Progress.Finish(fmt.Sprintf("%s/s p99 %s", FormatCount(lr.Throughput), FormatNs(lr.Latency.P99)))
		}
	}
	sr.Small, sr.Large = MedianResult(smallRuns), MedianResult(largeRuns)
	if sr.Small.Throughput > 0 {
		sr.Ratio = sr.Large.Throughput / sr.Small.Throughput
	}
	return sr, nil
}

// populateEstimate is a rough planned length for adding n keys.
func populateEstimate(n uint64) time.Duration {
	return time.Duration(float64(n)/150_000*float64(time.Second)) + 300*time.Millisecond
}

// MeasureMemory starts a fresh instance of each target, reads its RSS,
// creates n live token-bucket keys, and reads the RSS again.
func (r *Runner) MeasureMemory(ctx context.Context, targets []string, n uint64) ([]MemorySeries, error) {
	o := SweepOptions{Targets: targets, Counts: []uint64{n}}
	s, err := r.Sweep(ctx, o)
	if err != nil && !errors.Is(err, context.Canceled) {
		return s, fmt.Errorf("memory: %w", err)
	}
	return s, err
}

// FormatBytes prints a byte count in KiB, MiB or GiB.
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
