package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// atLeast sets the option *v to def when it is below least, the smallest
// value that makes sense (1 for counts and durations: left unset, an
// option is 0).
func atLeast[T cmp.Ordered](v *T, least, def T) {
	if *v < least {
		*v = def
	}
}

// Suite sections, for SuiteOptions.Only and Skip.
const (
	SectionGoals      = "goals"
	SectionDurability = "durability"
	SectionAlgorithms = "algorithms"
	SectionVariants   = "variants"
	SectionConns      = "conns"
	SectionClient     = "client"
	SectionMemory     = "memory"
	SectionKeys       = "keys"
	SectionAccuracy   = "accuracy"
)

// Sections lists every section in the order the suite runs them.
func Sections() []string {
	return []string{SectionGoals, SectionDurability, SectionAlgorithms, SectionVariants, SectionConns, SectionClient, SectionMemory, SectionKeys, SectionAccuracy}
}

// DefaultSections are the sections a suite runs unless told otherwise:
// all but durability, which starts six clusters (about two minutes more).
func DefaultSections() []string {
	return slices.DeleteFunc(Sections(), func(s string) bool { return s == SectionDurability })
}

// SuiteOptions configure the default suite.
type SuiteOptions struct {
	Duration      time.Duration // measured length of a goal run (default 2s)
	ShortDuration time.Duration // measured length of any other run (default 1s)
	Warmup        time.Duration // before every run (default 500ms)
	Rounds        int           // rounds of the goal cases (default 3)
	ShortRounds   int           // rounds of the other cases (default 2)
	Conns         int           // connections (default 50, as redis-benchmark)
	Keys          uint64        // distinct keys (default 100000, as redis-benchmark -r)
	MemoryKeys    uint64        // keys of the memory-per-key measurement (default 1M)
	MaxKeys       uint64        // largest key count of the key-count sweep (default 1M)
	ConnSteps     []int         // connection counts of the connection sweep
	Sections      map[string]bool
}

// DefaultSuiteOptions is the suite `make bench` runs, in under five minutes
// on two cores.
func DefaultSuiteOptions() SuiteOptions {
	o := SuiteOptions{}
	o.defaults()
	return o
}

// FullSuiteOptions is a longer, steadier suite: 10 s runs, 5 rounds, the
// key-count sweep up to 10M keys, and every section.
func FullSuiteOptions() SuiteOptions {
	o := SuiteOptions{Duration: 10 * time.Second, ShortDuration: 5 * time.Second, Warmup: time.Second,
		Rounds: 5, ShortRounds: 3, MaxKeys: 10_000_000, Sections: map[string]bool{}}
	for _, s := range Sections() {
		o.Sections[s] = true
	}
	o.defaults()
	return o
}

func (o *SuiteOptions) defaults() {
	atLeast(&o.Duration, 1, 2*time.Second)
	atLeast(&o.ShortDuration, 1, time.Second)
	atLeast(&o.Warmup, 1, 500*time.Millisecond)
	atLeast(&o.Rounds, 1, 3)
	atLeast(&o.ShortRounds, 1, 2)
	atLeast(&o.Conns, 1, 50)
	atLeast(&o.Keys, 1, 100_000)
	atLeast(&o.MemoryKeys, 1, 1_000_000)
	atLeast(&o.MaxKeys, 1, 1_000_000)
	if len(o.ConnSteps) == 0 {
		o.ConnSteps = []int{1, 8, 50, 200}
	}
	if o.Sections == nil {
		o.Sections = map[string]bool{}
		for _, s := range DefaultSections() {
			o.Sections[s] = true
		}
	}
}

// memoryFromSweep reports whether the memory-per-key figure is taken from
// the key-count sweep (which passes through MemoryKeys) instead of a run of
// its own, to save the time of creating the keys twice.
func (o SuiteOptions) memoryFromSweep() bool {
	return o.Sections[SectionKeys] && slices.Contains(keyCounts(o.MaxKeys), o.MemoryKeys)
}

// memoryAt keeps, of each series, the point at n keys.
func memoryAt(ss []MemorySeries, n uint64) []MemorySeries {
	out := make([]MemorySeries, len(ss))
	for i, s := range ss {
		out[i] = MemorySeries{Target: s.Target, Unavailable: s.Unavailable, Err: s.Err}
		if p, ok := s.At(n); ok {
			out[i].Points = []MemoryPoint{p}
		}
	}
	return out
}

// keyCounts are the powers of ten from 1k to max (max included).
func keyCounts(maxKeys uint64) []uint64 {
	var out []uint64
	for n := uint64(1000); n < maxKeys; n *= 10 {
		out = append(out, n)
	}
	return append(out, maxKeys)
}

// GoalTargets are the targets of the goal cases; redis-anchor, the anchor
// script, is the baseline. (The five-integer token script runs against
// sluice in the alg-token case.)
func GoalTargets() []string {
	return []string{TargetSluiceMem, TargetSluiceDurable, TargetSluiceCluster, TargetRedisAnchor}
}

// throughputGoals are the goal cases' goals, by pipeline depth: sluice
// against Redis running the anchor Lua token bucket.
var throughputGoals = map[int][]Goal{
	16: {
		{Target: TargetSluiceMem, About: "single node in memory", Min: 3},
		{Target: TargetSluiceCluster, About: "durable three-node cluster, connections spread over the nodes", Min: 1},
		{Target: TargetSluiceClusterLeader, About: "durable three-node cluster, connections on the leader (as one redis-benchmark)", Min: 1},
	},
	1: {
		{Target: TargetSluiceMem, About: "single node in memory", Min: 1.5},
		{Target: TargetSluiceCluster, About: "durable three-node cluster, connections spread over the nodes", Min: 1},
	},
}

// memoryGoal: sluice's RSS per live key against Redis's (the memory
// section); scaleGoal: sluice's throughput with 10M keys against with 1k
// (the key-count sweep's scale run).
var (
	memoryGoal = Goal{Target: TargetSluiceMem, About: "RSS per live key against Redis's", Max: 0.5}
	scaleGoal  = Goal{Target: TargetSluiceMem, About: "throughput at 10M keys against at 1k keys (P16)", Min: 0.8}
)

// Cases are the throughput cases of the suite, in the order they run.
func (o SuiteOptions) Cases() []Case {
	o.defaults()
	short := LoadOptions{Conns: o.Conns, Duration: o.ShortDuration, Warmup: o.Warmup, Pipeline: 16}
	var cs []Case
	if o.Sections[SectionGoals] {
		for _, p := range []int{1, 16} {
			targets := GoalTargets()
			if p == 16 { // the redis-benchmark -c 50 -P 16 sends every connection to one node
				targets = slices.Insert(targets, 3, TargetSluiceClusterLeader)
			} else { // one request per round trip: the load generator's own ceiling matters
				targets = append(targets, TargetRedisEcho)
			}
			cs = append(cs, Case{
				ID:       fmt.Sprintf("goal-p%d", p),
				Title:    fmt.Sprintf("Token bucket, %d connections, pipeline %d, uniform over %d keys (redis-benchmark -c %d -r %d -P %d)", o.Conns, p, o.Keys, o.Conns, o.Keys, p),
				Workload: Workload{Alg: AlgToken, Keys: o.Keys, Dist: DistUniform, Cost: 1},
				Load:     LoadOptions{Conns: o.Conns, Pipeline: p, Duration: o.Duration, Warmup: o.Warmup},
				Targets:  targets, Rounds: o.Rounds, Baseline: TargetRedisAnchor, Goals: throughputGoals[p],
			})
		}
	}
	if o.Sections[SectionDurability] {
		// The durable cluster, clients on the leader, with each log store
		// in each durability mode, beside the goals' Redis+Lua baseline.
		for _, p := range []int{1, 16} {
			cs = append(cs, Case{
				ID:       fmt.Sprintf("durability-p%d", p),
				Title:    fmt.Sprintf("Log stores and durability modes: token bucket, %d connections on the cluster's leader, pipeline %d, uniform over %d keys", o.Conns, p, o.Keys),
				Workload: Workload{Alg: AlgToken, Keys: o.Keys, Dist: DistUniform, Cost: 1},
				Load:     LoadOptions{Conns: o.Conns, Pipeline: p, Duration: o.Duration, Warmup: o.Warmup},
				Targets:  append(DurabilityTargets(), TargetRedisAnchor), Rounds: o.Rounds, Baseline: TargetRedisAnchor,
			})
		}
	}
	pair := []string{TargetSluiceMem, TargetRedis}
	if o.Sections[SectionAlgorithms] {
		for _, a := range Algorithms() {
			cs = append(cs, Case{
				ID:       "alg-" + string(a),
				Title:    fmt.Sprintf("%s, uniform over %d keys, 10%% denied, P16", a.Command(), o.Keys),
				Workload: Workload{Alg: a, Keys: o.Keys, Dist: DistUniform, Cost: 1, DenyShare: 0.1},
				Load:     short, Targets: pair, Rounds: o.ShortRounds, Baseline: TargetRedis,
			})
		}
	}
	if o.Sections[SectionVariants] {
		vs := []struct {
			id, title string
			w         Workload
		}{
			{"token-zipf", "RL.TOKEN, Zipf(0.99) hot keys over %d keys, P16", Workload{Alg: AlgToken, Keys: o.Keys, Dist: DistZipf, Cost: 1}},
			{"token-hot", "RL.TOKEN, one hot key, P16", Workload{Alg: AlgToken, Keys: 1, Dist: DistHot, Cost: 1}},
			{"token-deny50", "RL.TOKEN, uniform over %d keys, 50%% denied, P16", Workload{Alg: AlgToken, Keys: o.Keys, Dist: DistUniform, Cost: 1, DenyShare: 0.5}},
			{"token-cost5", "RL.TOKEN COST 5, uniform over %d keys, 10%% denied, P16", Workload{Alg: AlgToken, Keys: o.Keys, Dist: DistUniform, Cost: 5, DenyShare: 0.1}},
		}
		for _, v := range vs {
			title := v.title
			if v.w.Dist != DistHot {
				title = fmt.Sprintf(v.title, o.Keys)
			}
			cs = append(cs, Case{ID: v.id, Title: title, Workload: v.w, Load: short, Targets: pair, Rounds: o.ShortRounds, Baseline: TargetRedis})
		}
	}
	if o.Sections[SectionConns] {
		for _, n := range o.ConnSteps {
			l := short
			l.Conns, l.Pipeline = n, 1
			cs = append(cs, Case{
				ID:       fmt.Sprintf("conns-%d", n),
				Title:    fmt.Sprintf("RL.TOKEN, %d connections, P1, uniform over %d keys", n, o.Keys),
				Workload: Workload{Alg: AlgToken, Keys: o.Keys, Dist: DistUniform, Cost: 1},
				Load:     l, Targets: []string{TargetSluiceMem, TargetRedisAnchor}, Rounds: 1, Baseline: TargetRedisAnchor,
			})
		}
	}
	return cs
}

// PlannedLength estimates how long the suite takes.
func (o SuiteOptions) PlannedLength() time.Duration {
	var d time.Duration
	for _, c := range o.Cases() {
		d += c.plannedLength() + time.Duration(c.Rounds*len(c.Targets))*300*time.Millisecond
	}
	if o.Sections[SectionClient] {
		d += 8 * (o.ShortDuration + o.Warmup)
	}
	if o.Sections[SectionMemory] && !o.memoryFromSweep() {
		d += 2 * populateEstimate(o.MemoryKeys)
	}
	if o.Sections[SectionKeys] {
		for _, n := range keyCounts(o.MaxKeys) {
			d += 2 * (o.ShortDuration + o.Warmup)
			_ = n
		}
		d += 2*populateEstimate(o.MaxKeys) + time.Duration(2*o.Rounds)*(o.Duration+o.Warmup+300*time.Millisecond)
	}
	if o.Sections[SectionAccuracy] {
		d += 6 * time.Second
	}
	return d
}

// RunSuite runs the suite's sections and returns the report.
func (r *Runner) RunSuite(ctx context.Context, o SuiteOptions) (*Report, error) {
	o.defaults()
	rep := &Report{Started: time.Now(), Options: o}
	for _, c := range o.Cases() {
		cr, err := r.RunCase(ctx, c)
		rep.Cases = append(rep.Cases, cr)
		if err != nil {
			return rep, err
		}
	}
	if o.Sections[SectionClient] {
		rep.Calibration = r.Calibrate(ctx, []string{TargetSluiceMem, TargetRedisAnchor}, []int{1, 16}, o.Conns, o.Keys, o.ShortDuration, o.Warmup)
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	if o.Sections[SectionMemory] && !o.memoryFromSweep() {
		s, err := r.MeasureMemory(ctx, []string{TargetSluiceMem, TargetRedis}, o.MemoryKeys)
		rep.Memory = s
		if err != nil {
			return rep, err
		}
	}
	if o.Sections[SectionKeys] {
		s, err := r.Sweep(ctx, SweepOptions{
			Targets: []string{TargetSluiceMem, TargetRedis},
			Counts:  keyCounts(o.MaxKeys),
			Load:    LoadOptions{Conns: o.Conns, Pipeline: 16, Duration: o.ShortDuration, Warmup: o.Warmup},
			Rounds:  1,
			// the goal's figure: the largest count against 1k, interleaved
			ScaleTargets: []string{TargetSluiceMem},
			ScaleRounds:  o.Rounds,
			ScaleLoad:    LoadOptions{Conns: o.Conns, Pipeline: 16, Duration: o.Duration, Warmup: o.Warmup},
		})
		rep.Keys = s
		if err != nil {
			return rep, err
		}
		if o.Sections[SectionMemory] && o.memoryFromSweep() {
			rep.Memory = memoryAt(s, o.MemoryKeys)
			rep.MemoryFromSweep = true
		}
	}
	if o.Sections[SectionAccuracy] {
		a := r.Accuracy(ctx, AccuracyOptions{})
		rep.Accuracy = &a
	}
	rep.Finished = time.Now()
	return rep, ctx.Err()
}
