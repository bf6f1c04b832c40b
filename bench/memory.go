package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// MemoryParams are the limits of the keys created to measure memory: token
// buckets of 2^40 refilled at one token an hour, so that every key stays
// live (not back at its initial state) for an hour after it is touched.
// Their names are MemoryKeyPrefix and 12 digits, as in the anchor
// measurement.
func MemoryParams() Params { return Params{Limit: 1 << 40, RateN: 1, Period: time.Hour, Cost: 1} }

// MemoryKeyPrefix starts the names of the keys of memory runs.
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

// Last is the last point, or a zero point.
func (s MemorySeries) Last() MemoryPoint {
	if len(s.Points) == 0 {
		return MemoryPoint{}
	}
	return s.Points[len(s.Points)-1]
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

// SweepOptions say how to measure memory and throughput against key count.
type SweepOptions struct {
	Targets []string
	Counts  []uint64    // increasing key counts, e.g. 1k, 10k, ..., 1M
	Load    LoadOptions // the throughput run at each count; Duration 0 skips it
	// With ScaleRounds > 0 the sluice targets are compared at the largest
	// and the smallest count in interleaved rounds of ScaleLoad once the
	// sweep is done (see ScaleResult).
	ScaleRounds int
	ScaleLoad   LoadOptions
}

// Sweep measures each target in turn on a fresh instance: for each count
// it adds live keys up to the count, reads the RSS right away and, if Load
// has a duration, measures token-bucket throughput with uniform keys over
// the keys that exist; then the scale comparison (ScaleRounds). A target's
// failure is its series' Err: the sweep stops only when its context ends.
func (r *Runner) Sweep(ctx context.Context, o SweepOptions) ([]MemorySeries, error) {
	var out []MemorySeries
	for _, name := range o.Targets {
		if ctx.Err() == nil {
			out = append(out, r.sweep(ctx, name, o))
		}
	}
	return out, ctx.Err()
}

func (r *Runner) sweep(ctx context.Context, name string, o SweepOptions) MemorySeries {
	s, step := MemorySeries{Target: name}, "memory: start "+name
	fail := func(err error) MemorySeries {
		s.Err = err.Error()
		r.note(step, err)
		return s
	}
	t, err := StartTarget(ctx, r.Env.cfg, name)
	if err != nil {
		s.Unavailable = err.Error()
		r.note(step, "unavailable: "+shorten(err.Error(), 80))
		return s
	}
	defer t.Stop()
	time.Sleep(300 * time.Millisecond) // let the new process settle
	base, err := ProcessRSS(t.PIDs())
	if err != nil {
		return fail(err)
	}
	r.note(step, "RSS "+FormatBytes(base))
	w := Workload{Alg: AlgToken, Dist: DistUniform, Cost: 1, Prefix: MemoryKeyPrefix, Allow: MemoryParams(), Deny: MemoryParams()}
	for _, n := range o.Counts {
		step = fmt.Sprintf("memory: %s keys on %s", FormatCount(float64(n)), name)
		p, err := addKeys(ctx, t, s.Last().Keys, n, base)
		if err != nil {
			return fail(err)
		}
		r.note(step, fmt.Sprintf("RSS %s, %.0f B/key, dbsize %d", FormatBytes(p.RSS), p.PerKey, p.DBSize))
		if o.Load.Duration > 0 {
			step, w.Keys = fmt.Sprintf("keys=%s: %s", FormatCount(float64(n)), name), n
			lr, err := t.load(ctx, w, o.Load, 1)
			if err != nil {
				s.Points = append(s.Points, p)
				return fail(err)
			}
			r.note(step, lr)
			p.Throughput, p.Latency = lr.Throughput, lr.Latency
		}
		s.Points = append(s.Points, p)
	}
	if o.ScaleRounds > 0 && !IsRedis(name) && len(o.Counts) > 1 && ctx.Err() == nil {
		s.Scale = r.scale(ctx, t, w, o.Counts[0], s.Last().Keys, o)
	}
	return s
}

// addKeys creates the live keys [have, n) on t and reads its memory.
func addKeys(ctx context.Context, t *Target, have, n uint64, base int64) (MemoryPoint, error) {
	tpl, err := t.Dialect.Template(AlgToken, MemoryParams())
	if err == nil {
		err = Populate(ctx, t.Addrs, tpl, MemoryKeyPrefix, have, n, 8)
	}
	if err != nil {
		return MemoryPoint{}, err
	}
	time.Sleep(300 * time.Millisecond) // let the allocator settle after the burst of writes
	p := MemoryPoint{Keys: n, BaseRSS: base, DBSize: -1, UsedMemory: -1}
	if p.RSS, err = ProcessRSS(t.PIDs()); err != nil {
		return p, err
	}
	p.PerKey = float64(p.RSS-base) / float64(max(n, 1))
	if v, err := t.Do(ctx, "DBSIZE"); err == nil {
		p.DBSize = v.Int
	}
	if u, err := strconv.ParseInt(info(ctx, t, "memory")["used_memory"], 10, 64); err == nil {
		p.UsedMemory = u
	}
	return p, nil
}

// scale runs the ScaleResult comparison for target t, which holds large
// keys, against a second instance holding small keys.
func (r *Runner) scale(ctx context.Context, t *Target, w Workload, small, large uint64, o SweepOptions) *ScaleResult {
	sr := &ScaleResult{SmallKeys: small, LargeKeys: large, Rounds: o.ScaleRounds}
	step := fmt.Sprintf("scale: start a second %s with %s keys", t.Name, FormatCount(float64(small)))
	st, err := StartTarget(ctx, r.Env.cfg, t.Name)
	if err == nil {
		defer st.Stop()
		_, err = addKeys(ctx, st, 0, small, 0)
	}
	var runs [2][]LoadResult
	for round := 0; round < o.ScaleRounds && err == nil; round++ {
		for side, tg := range []*Target{st, t} {
			if err == nil {
				w.Keys = []uint64{small, large}[side]
				step = fmt.Sprintf("scale: %s keys round %d/%d", FormatCount(float64(w.Keys)), round+1, o.ScaleRounds)
				var lr LoadResult
				if lr, err = tg.load(ctx, w, o.ScaleLoad, uint64(round+1)); err == nil {
					runs[side] = append(runs[side], lr)
					r.note(step, lr)
				}
			}
		}
	}
	if err != nil {
		sr.Err = err.Error()
		r.note(step, err)
		return sr
	}
	sr.Small, sr.Large = MedianResult(runs[0]), MedianResult(runs[1])
	sr.Ratio = quot(sr.Large.Throughput, sr.Small.Throughput)
	return sr
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
