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

// Suite sections, for SuiteOptions.Sections.
const (
	SectionGoals      = "goals"
	SectionDurability = "durability"
	SectionAlgorithms = "algorithms"
	SectionVariants   = "variants"
	SectionConns      = "conns"
	SectionMemory     = "memory"
	SectionKeys       = "keys"
)

// Sections lists every section in the order the suite runs them.
func Sections() []string {
	return []string{SectionGoals, SectionDurability, SectionAlgorithms, SectionVariants, SectionConns, SectionMemory, SectionKeys}
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

// Defaults fills the options left unset.
func (o *SuiteOptions) Defaults() {
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
	if o.Sections == nil { // all but durability, which starts six clusters (about two minutes more)
		o.Sections = map[string]bool{}
		for _, s := range slices.DeleteFunc(Sections(), func(s string) bool { return s == SectionDurability }) {
			o.Sections[s] = true
		}
	}
}

// sweepCounts are the key counts of the sweep: the powers of ten from 1k
// to MaxKeys for the keys section, and MemoryKeys, the memory section's
// point (one sweep creates the keys of both).
func (o SuiteOptions) sweepCounts() []uint64 {
	var counts []uint64
	if o.Sections[SectionKeys] {
		counts = keyCounts(o.MaxKeys)
	}
	if o.Sections[SectionMemory] {
		counts = append(counts, o.MemoryKeys)
	}
	slices.Sort(counts)
	return slices.Compact(counts)
}

// keyCounts are the powers of ten from 1k to max (max included).
func keyCounts(maxKeys uint64) []uint64 {
	var out []uint64
	for n := uint64(1000); n < maxKeys; n *= 10 {
		out = append(out, n)
	}
	return append(out, maxKeys)
}

// MemoryGoal is the memory section's goal: sluice's RSS per live key
// against Redis's. ScaleGoal is the key-count sweep's: sluice's throughput
// with 10M keys against with 1k, measured in interleaved rounds.
var (
	MemoryGoal = Goal{Target: TargetSluiceMem, About: "RSS per live key against Redis's", Max: 0.5}
	ScaleGoal  = Goal{Target: TargetSluiceMem, About: "throughput at 10M keys against at 1k keys (P16)", Min: 0.8}
)

// Cases are the throughput cases of the suite, in the order they run, each
// with the goals it measures: a ratio of a target's median throughput to
// the baseline's (redis-anchor, the anchor Lua token bucket, for the goal
// cases).
func (o SuiteOptions) Cases() []Case {
	o.Defaults()
	const (
		mem, spread, leader = "single node in memory", "durable three-node cluster, connections spread over the nodes", "durable three-node cluster, connections on the leader (as one redis-benchmark)"
	)
	token := Workload{Alg: AlgToken, Keys: o.Keys, Dist: DistUniform, Cost: 1}
	long := func(p int) LoadOptions {
		return LoadOptions{Conns: o.Conns, Pipeline: p, Duration: o.Duration, Warmup: o.Warmup}
	}
	short := LoadOptions{Conns: o.Conns, Duration: o.ShortDuration, Warmup: o.Warmup, Pipeline: 16}
	rb := func(p int) string {
		return fmt.Sprintf("Token bucket, %d connections, pipeline %d, uniform over %d keys (redis-benchmark -c %d -r %d -P %d)", o.Conns, p, o.Keys, o.Conns, o.Keys, p)
	}
	dur := func(p int) string {
		return fmt.Sprintf("Log stores and durability modes: token bucket, %d connections on the cluster's leader, pipeline %d, uniform over %d keys", o.Conns, p, o.Keys)
	}
	pair := []string{TargetSluiceMem, TargetRedis}
	variant := func(id, title string, w Workload) Case {
		return Case{Section: SectionVariants, ID: id, Title: title, Workload: w, Load: short, Targets: pair, Rounds: o.ShortRounds, Baseline: TargetRedis}
	}
	// At P1 one request per round trip: the load generator's own ceiling
	// (redis-echo) matters. At P16, the redis-benchmark -c 50 -P 16
	// sends every connection to one node (sluice-cluster-leader).
	cs := []Case{
		{Section: SectionGoals, ID: "goal-p1", Title: rb(1), Workload: token, Load: long(1), Rounds: o.Rounds, Baseline: TargetRedisAnchor,
			Targets: []string{TargetSluiceMem, TargetSluiceDurable, TargetSluiceCluster, TargetRedisAnchor, TargetRedisEcho},
			Goals:   []Goal{{Target: TargetSluiceMem, About: mem, Min: 1.5}, {Target: TargetSluiceCluster, About: spread, Min: 1}}},
		{Section: SectionGoals, ID: "goal-p16", Title: rb(16), Workload: token, Load: long(16), Rounds: o.Rounds, Baseline: TargetRedisAnchor,
			Targets: []string{TargetSluiceMem, TargetSluiceDurable, TargetSluiceCluster, TargetSluiceClusterLeader, TargetRedisAnchor},
			Goals:   []Goal{{Target: TargetSluiceMem, About: mem, Min: 3}, {Target: TargetSluiceCluster, About: spread, Min: 1}, {Target: TargetSluiceClusterLeader, About: leader, Min: 1}}},
		// The durable cluster, clients on the leader, with each log store
		// in each durability mode, beside the goals' Redis+Lua baseline.
		{Section: SectionDurability, ID: "durability-p1", Title: dur(1), Workload: token, Load: long(1), Rounds: o.Rounds, Baseline: TargetRedisAnchor,
			Targets: append(DurabilityTargets(), TargetRedisAnchor)},
		{Section: SectionDurability, ID: "durability-p16", Title: dur(16), Workload: token, Load: long(16), Rounds: o.Rounds, Baseline: TargetRedisAnchor,
			Targets: append(DurabilityTargets(), TargetRedisAnchor)},
	}
	for _, a := range Algorithms() {
		cs = append(cs, Case{Section: SectionAlgorithms, ID: "alg-" + string(a), Title: fmt.Sprintf("%s, uniform over %d keys, 10%% denied, P16", a.Command(), o.Keys),
			Workload: Workload{Alg: a, Keys: o.Keys, Dist: DistUniform, Cost: 1, DenyShare: 0.1}, Load: short, Targets: pair, Rounds: o.ShortRounds, Baseline: TargetRedis})
	}
	cs = append(cs,
		variant("token-zipf", fmt.Sprintf("RL.TOKEN, Zipf(0.99) hot keys over %d keys, P16", o.Keys), Workload{Alg: AlgToken, Keys: o.Keys, Dist: DistZipf, Cost: 1}),
		variant("token-hot", "RL.TOKEN, one hot key, P16", Workload{Alg: AlgToken, Keys: 1, Dist: DistHot, Cost: 1}),
		variant("token-deny50", fmt.Sprintf("RL.TOKEN, uniform over %d keys, 50%% denied, P16", o.Keys), Workload{Alg: AlgToken, Keys: o.Keys, Dist: DistUniform, Cost: 1, DenyShare: 0.5}),
		variant("token-cost5", fmt.Sprintf("RL.TOKEN COST 5, uniform over %d keys, 10%% denied, P16", o.Keys), Workload{Alg: AlgToken, Keys: o.Keys, Dist: DistUniform, Cost: 5, DenyShare: 0.1}))
	for _, n := range o.ConnSteps {
		l := short
		l.Conns, l.Pipeline = n, 1
		cs = append(cs, Case{Section: SectionConns, ID: fmt.Sprintf("conns-%d", n), Title: fmt.Sprintf("RL.TOKEN, %d connections, P1, uniform over %d keys", n, o.Keys),
			Workload: token, Load: l, Targets: []string{TargetSluiceMem, TargetRedisAnchor}, Rounds: 1, Baseline: TargetRedisAnchor})
	}
	return slices.DeleteFunc(cs, func(c Case) bool { return !o.Sections[c.Section] })
}

// PlannedLength estimates how long the suite takes: its runs, 300ms
// between two, and about 150k new keys a second on each sweep target.
func (o SuiteOptions) PlannedLength() time.Duration {
	o.Defaults()
	var d time.Duration
	runs := func(n int, length time.Duration) { d += time.Duration(n) * (length + o.Warmup + 300*time.Millisecond) }
	for _, c := range o.Cases() {
		runs(c.Rounds*len(c.Targets), c.Load.Duration)
	}
	if counts := o.sweepCounts(); len(counts) > 0 {
		d += 2 * time.Duration(float64(slices.Max(counts))/150_000*float64(time.Second))
	}
	if o.Sections[SectionKeys] {
		runs(2*len(o.sweepCounts()), o.ShortDuration)
		runs(2*o.Rounds, o.Duration) // the scale goal's rounds
	}
	return d
}

// RunSuite runs the suite's sections and returns the report. One key-count
// sweep gives the keys section's points and the memory section's, the
// point at MemoryKeys.
func (r *Runner) RunSuite(ctx context.Context, o SuiteOptions) (*Report, error) {
	o.Defaults()
	rep := &Report{Started: time.Now(), Options: o}
	for _, c := range o.Cases() {
		cr, err := r.RunCase(ctx, c)
		rep.Cases = append(rep.Cases, cr)
		if err != nil {
			return rep, err
		}
	}
	var err error
	if counts := o.sweepCounts(); len(counts) > 0 && ctx.Err() == nil {
		so := SweepOptions{Targets: []string{TargetSluiceMem, TargetRedis}, Counts: counts}
		if o.Sections[SectionKeys] { // throughput at each count; the scale goal's figure: the largest count against 1k, interleaved
			so.Load = LoadOptions{Conns: o.Conns, Pipeline: 16, Duration: o.ShortDuration, Warmup: o.Warmup}
			so.ScaleRounds, so.ScaleLoad = o.Rounds, so.Load
			so.ScaleLoad.Duration = o.Duration
		}
		var sweep []MemorySeries
		sweep, err = r.Sweep(ctx, so)
		if o.Sections[SectionKeys] {
			rep.Keys = sweep
		}
		for _, s := range sweep { // of each series, the point at MemoryKeys
			s.Scale, s.Points = nil, slices.DeleteFunc(slices.Clone(s.Points), func(p MemoryPoint) bool { return p.Keys != o.MemoryKeys })
			if o.Sections[SectionMemory] {
				rep.Memory, rep.MemoryFromSweep = append(rep.Memory, s), o.Sections[SectionKeys]
			}
		}
	}
	rep.Finished = time.Now()
	return rep, cmp.Or(err, ctx.Err())
}
