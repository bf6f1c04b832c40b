// Command sluice-chaos is sluice's fault-injection test: it runs a real
// three-node cluster on 127.0.0.1 while clients on every node send RL.*
// commands against known limits, injects faults one at a time (kill -9 of
// the leader and of a follower, SIGSTOP/SIGCONT pauses, partitions through
// per-link proxies, a leader-follower link silent for 30 s whose forwarding
// connections stay stuck after the heal, full restarts, leadership on a
// node whose clock is off by seconds), records every request with its node, send and reply time
// and reply, and checks the history:
//
//   - bound: the admissions of each key never exceed what its algorithm
//     allows over the leader-stamped time they span;
//   - monotonic: no acknowledged admission is forgotten (remaining never
//     rises except by refill);
//   - linearizable: the keys with no refill are linearizable counters
//     (porcupine; a violation writes its HTML visualization);
//   - ledger: after the run every node reports the same units left on those
//     keys, and exactly the units of the decisions that applied are gone;
//   - replicas: after healing, every Raft group has a leader and every
//     replica holds the same state (DEBUG DIGEST once all have applied the
//     same log of every group);
//   - and no node exits on its own, every reply is well-formed, and the
//     cluster serves again after every heal (within 2 s of a stalled
//     link's).
//
// A CLUSTERDOWN reply counts as "certainly not applied" and UNCERTAIN as
// "may have applied": a CLUSTERDOWN decision that turns out applied breaks
// the ledger and linearizability checks.
//
// With -shards N every node runs N Raft groups, each owning a range of the
// hash slots: the workload's keys are named so that every group gets some,
// each fault aimed at "the leader" aims at the leader of a group picked at
// random (RAFT.STATUS <group>), and a fault on a node hits all its groups.
// The checks are per key, so they hold as they are.
//
// Randomness comes from one seed, printed first. The last line is
// "chaos: F faults, N operations, V violations"; the exit status is 1 when
// V > 0. The output directory holds the node logs, the history
// (history.jsonl), the report and any visualization.
//
// The nodes get hidden, test-only flags of sluice: --debug-dial-map (to go
// through the proxies) and --debug-clock-skew.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	sluicecluster "github.com/sluice-rl/sluice/cluster"
)

// options are the flags.
type options struct {
	bin            string
	duration       time.Duration
	seed           uint64
	out            string
	workers        int
	rate           int
	skew           time.Duration
	genEvery       time.Duration
	holdMin        time.Duration
	holdMax        time.Duration
	stallHold      time.Duration
	quietMin       time.Duration
	quietMax       time.Duration
	requestTimeout time.Duration
	linPerKey      time.Duration
	linBudget      time.Duration
	verbose        bool
	sluiceFlags    string
	shards         int
	faults         []faultKind // the kinds to inject; nil: every kind
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("sluice-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bin, "sluice-bin", "bin/sluice", "the sluice binary to run")
	fs.DurationVar(&o.duration, "duration", 5*time.Minute, "how long to inject faults (checks follow)")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed (default: from the time; printed)")
	fs.StringVar(&o.out, "out", "results/chaos", "directory for logs, history, report (a previous run's is replaced)")
	fs.IntVar(&o.workers, "workers", 4, "clients per node")
	fs.IntVar(&o.rate, "rate", 300, "requests per second, all clients together")
	fs.DurationVar(&o.skew, "skew", 3*time.Second, "how far one node's clock is off (its sign comes from the seed)")
	fs.DurationVar(&o.genEvery, "generation", 15*time.Second, "a fresh set of keys every this long")
	fs.DurationVar(&o.holdMin, "hold-min", time.Second, "shortest fault")
	fs.DurationVar(&o.holdMax, "hold-max", 5*time.Second, "longest fault")
	fs.DurationVar(&o.stallHold, "stall-hold", 30*time.Second, "how long a stalled link stays silent (every node must serve within 2s of its heal)")
	fs.DurationVar(&o.quietMin, "quiet-min", 2*time.Second, "shortest calm between faults")
	fs.DurationVar(&o.quietMax, "quiet-max", 4*time.Second, "longest calm between faults")
	fs.DurationVar(&o.requestTimeout, "request-timeout", 5*time.Second, "a request without a reply by then has an unknown outcome")
	fs.DurationVar(&o.linPerKey, "lin-timeout", 10*time.Second, "longest linearizability search per key")
	fs.DurationVar(&o.linBudget, "lin-budget", 2*time.Minute, "longest linearizability search in all")
	fs.BoolVar(&o.verbose, "v", false, "log debug detail")
	fs.StringVar(&o.sluiceFlags, "sluice-flags", "", `more flags for every node, e.g. "--raft-log wal --fsync everysec"`)
	fs.IntVar(&o.shards, "shards", 1, "Raft groups per node (every node's --shards): the keys spread over all, the leader faults pick a group")
	faults := fs.String("faults", "", "the fault kinds to inject, comma-separated (default: every kind, in turn)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, name := range strings.FieldsFunc(*faults, func(r rune) bool { return r == ',' }) {
		k, ok := parseFaultKind(strings.TrimSpace(name))
		if !ok {
			return o, fmt.Errorf("-faults: unknown fault kind %q", name)
		}
		o.faults = append(o.faults, k)
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.duration <= 0 || o.duration > time.Hour:
		return o, fmt.Errorf("-duration: want (0, 1h], got %v", o.duration)
	case o.workers < 1 || o.rate < 1:
		return o, errors.New("-workers and -rate must be positive")
	case o.skew < 0 || o.skew > time.Minute:
		return o, fmt.Errorf("-skew: want [0, 1m], got %v", o.skew)
	case o.holdMin <= 0 || o.holdMax < o.holdMin || o.quietMin <= 0 || o.quietMax < o.quietMin || o.stallHold <= 0:
		return o, errors.New("-hold-min <= -hold-max and -quiet-min <= -quiet-max, all positive")
	case o.genEvery < time.Second:
		return o, errors.New("-generation: at least 1s")
	case o.shards < 1 || o.shards > sluicecluster.MaxShards:
		return o, fmt.Errorf("-shards: want 1 to %d, got %d", sluicecluster.MaxShards, o.shards)
	}
	for _, f := range strings.Fields(o.sluiceFlags) {
		if name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "="); name == "shards" && strings.HasPrefix(f, "-") {
			return o, errors.New("-sluice-flags: give the Raft groups as -shards, which the checks need to know")
		}
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	return o, nil
}

func main() {
	opts, err := parseOptions(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "sluice-chaos:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, opts, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-chaos:", err)
		os.Exit(2)
	}
	fmt.Println(rep.summary())
	if len(rep.violations) > 0 {
		os.Exit(1)
	}
}

// report is the outcome of a run.
type report struct {
	seed       uint64
	faults     []faultEvent
	ops        []op
	keys       []*keySpec
	violations []violation
	admitted   int64
	lin        linStats
	digest     string
	index      []uint64 // each group's applied index when the digests were taken
}

// summary is the run's last line.
func (r *report) summary() string {
	return fmt.Sprintf("chaos: %d faults, %d operations, %d violations", len(r.faults), len(r.ops), len(r.violations))
}

// run starts the cluster, drives the workload and the faults, then checks.
func run(ctx context.Context, o options, stdout io.Writer) (*report, error) {
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("sluice binary: %w (make build)", err)
	}
	if err := emptyOutDir(o.out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.out, err)
	}
	logf, err := os.Create(filepath.Join(o.out, "chaos.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(logf, stdout), &slog.HandlerOptions{Level: level}))

	rng := rand.New(rand.NewPCG(o.seed, 0x5eed))
	fmt.Fprintf(stdout, "chaos: seed %d (rerun with -seed %d), faults for %v, output in %s\n", o.seed, o.seed, o.duration, o.out)
	skewed := rng.IntN(3)
	skew := o.skew
	if rng.IntN(2) == 0 {
		skew = -skew
	}

	c, err := newCluster(bin, o.out, 3, o.shards, skewed, skew, strings.Fields(o.sluiceFlags), log)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	log.Info("cluster starting", "peers", c.Peers, "shards", o.shards, "skewed", c.nodes[skewed].ID, "skew", skew)
	if err := c.WaitServing(ctx, 60*time.Second, time.Second); err != nil {
		return nil, fmt.Errorf("cluster never served: %w", err)
	}

	rep := &report{seed: o.seed}
	startMono := time.Now()
	startWall := startMono.UnixNano()
	wl, err := newWorkload(o.genEvery, o.rate, startMono, o.duration+30*time.Second, o.shards)
	if err != nil {
		return nil, err
	}
	rec := &recorder{}
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	pace := time.Duration(int64(time.Second) * int64(o.workers*len(c.nodes)) / int64(o.rate))
	for i := range o.workers * len(c.nodes) {
		nd := c.nodes[i%len(c.nodes)]
		w := &worker{id: i, node: nd.Index, addr: nd.RESP, pace: pace, timeout: o.requestTimeout,
			rng: rand.New(rand.NewPCG(o.seed, uint64(i+1))), wl: wl, rec: rec, start: startMono}
		wg.Add(1)
		go func() { defer wg.Done(); w.run(wctx) }()
	}

	// Faults, one at a time, until the duration is spent.
	nem := &nemesis{c: c, rng: rng, skewed: skewed, kinds: o.faults}
	deadline := startMono.Add(o.duration)
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	for ctx.Err() == nil {
		quiet := between(o.quietMin, o.quietMax)
		hold := between(o.holdMin, o.holdMax)
		kind := nem.nextKind()
		if kind == faultStallLink {
			hold = o.stallHold
			if time.Now().Add(quiet + hold).After(deadline) {
				kind = nem.nextKind() // no time left for a long stall
				if kind == faultStallLink {
					kind = nem.nextKind()
				}
				hold = between(o.holdMin, o.holdMax)
			}
		}
		if time.Now().Add(quiet + hold).After(deadline) {
			break
		}
		if sleepCtx(ctx, quiet) != nil {
			break
		}
		desc, heal, err := nem.inject(ctx, kind)
		if err != nil && kind == faultReplace {
			// A replacement that failed halfway leaves a member missing.
			rep.violations = append(rep.violations, violation{Check: "membership", Msg: err.Error()})
			log.Error("replace failed", "err", err)
			_ = c.HealAll()
			continue
		} else if err != nil {
			log.Warn("fault not injected", "kind", kind, "err", err)
			continue
		}
		ev := faultEvent{N: len(rep.faults) + 1, Kind: kind, Desc: desc, Start: time.Since(startMono), Held: hold}
		log.Info("fault", "n", ev.N, "kind", kind, "what", desc, "hold", hold)
		_ = sleepCtx(ctx, hold)
		if err := heal(); err != nil {
			log.Error("heal failed", "n", ev.N, "err", err)
		}
		healed := time.Now()
		if err := c.WaitServing(ctx, 30*time.Second, time.Second); err != nil {
			ev.Recovered = -1
			rep.violations = append(rep.violations, violation{Check: "recovery",
				Msg: fmt.Sprintf("fault %d (%s): %v", ev.N, desc, err)})
			log.Error("no recovery", "n", ev.N, "err", err)
			_ = c.HealAll()
		} else {
			ev.Recovered = time.Since(healed)
			log.Info("healed", "n", ev.N, "recovered_in", ev.Recovered.Round(time.Millisecond))
			if kind == faultStallLink && ev.Recovered > stallRecovery {
				rep.violations = append(rep.violations, violation{Check: "recovery",
					Msg: fmt.Sprintf("fault %d (%s): served again %v after the heal, want within %v", ev.N, desc,
						ev.Recovered.Round(time.Millisecond), stallRecovery)})
			}
		}
		rep.faults = append(rep.faults, ev)
	}
	if ctx.Err() != nil {
		stopWorkers()
		wg.Wait()
		return nil, ctx.Err()
	}

	// Heal everything, let the clients see a calm cluster, then stop them.
	if err := c.HealAll(); err != nil {
		log.Error("final heal", "err", err)
	}
	if err := c.WaitServing(ctx, 60*time.Second, time.Second); err != nil {
		rep.violations = append(rep.violations, violation{Check: "recovery", Msg: "after the final heal: " + err.Error()})
	}
	_ = sleepCtx(ctx, 3*time.Second)
	stopWorkers()
	wg.Wait()
	rep.ops = rec.history()
	rep.keys = wl.allKeys()
	log.Info("workload stopped", "operations", len(rep.ops), "keys", len(rep.keys))

	// Replicas and final state.
	if ds, idx, err := c.digests(ctx, 60*time.Second); err != nil {
		rep.violations = append(rep.violations, violation{Check: "replicas", Msg: err.Error()})
	} else {
		rep.index = idx
		rep.digest = strings.Join(ds, ", ")
		for _, d := range ds[1:] {
			if d[strings.IndexByte(d, '=')+1:] != ds[0][strings.IndexByte(ds[0], '=')+1:] {
				rep.violations = append(rep.violations, violation{Check: "replicas",
					Msg: fmt.Sprintf("state differs at %s: %s", appliedAt(idx), rep.digest)})
				break
			}
		}
	}
	reads := c.finalReads(rep.keys)
	for _, nd := range c.nodes {
		for _, msg := range nd.Crashes() {
			rep.violations = append(rep.violations, violation{Check: "process", Msg: msg})
		}
	}

	// The history: written first, so that a slow check leaves it behind.
	if err := writeHistory(filepath.Join(o.out, "history.jsonl"), startWall, rep.keys, rep.ops); err != nil {
		log.Error("history", "err", err)
	}
	ch := &checker{keys: rep.keys, startWall: startWall, slack: int64(o.skew + 250*time.Millisecond)}
	rep.violations = append(rep.violations, checkReplies(rep.keys, rep.ops)...)
	vs, admitted := ch.checkBounds(rep.ops)
	rep.admitted = admitted
	rep.violations = append(rep.violations, vs...)
	rep.violations = append(rep.violations, ch.checkMonotonic(rep.ops)...)
	rep.violations = append(rep.violations, ch.checkLedger(rep.ops, reads)...)
	vs, rep.lin = ch.checkLinearizable(rep.ops, o.out, o.linPerKey, o.linBudget)
	rep.violations = append(rep.violations, vs...)

	text := rep.render(c, skewed, skew)
	fmt.Fprint(stdout, text)
	if err := os.WriteFile(filepath.Join(o.out, "report.txt"), []byte(text+rep.summary()+"\n"), 0o644); err != nil {
		log.Error("report", "err", err)
	}
	return rep, nil
}

// emptyOutDir removes a previous run's output directory. It refuses to
// remove a non-empty directory that is not one (it has no chaos.log).
func emptyOutDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("-out %s: %w", dir, err)
	case len(entries) == 0:
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "chaos.log")); err != nil {
		return fmt.Errorf("-out %s: not empty and not a previous chaos output (no chaos.log): refusing to empty it", dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("empty %s: %w", dir, err)
	}
	return nil
}

// render is the human-readable report.
func (r *report) render(c *cluster, skewed int, skew time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nseed %d; %s's clock off by %+v; %d Raft group(s) per node\n", r.seed, c.nodes[skewed].ID, skew, c.shards)
	kinds := map[faultKind]int{}
	for _, f := range r.faults {
		kinds[f.Kind]++
	}
	fmt.Fprintf(&b, "faults (%d):", len(r.faults))
	for k := range numFaultKinds {
		fmt.Fprintf(&b, " %s %d,", k, kinds[k])
	}
	b.WriteString("\n")
	var worst time.Duration
	for _, f := range r.faults {
		worst = max(worst, f.Recovered)
	}
	fmt.Fprintf(&b, "slowest recovery after a heal: %v\n", worst.Round(time.Millisecond))
	statuses := map[status]int{}
	var allowed, denied int
	var lat []time.Duration
	for i := range r.ops {
		o := &r.ops[i]
		statuses[o.Status]++
		if o.Status == stOK {
			lat = append(lat, time.Duration(o.Return-o.Call))
			if !o.Peek && o.Allowed && o.Cost > 0 {
				allowed++
			} else if !o.Peek && !o.Allowed {
				denied++
			}
		}
	}
	fmt.Fprintf(&b, "operations %d: ok %d (allowed %d, denied %d), unknown %d, failed %d, unexpected %d; %d units admitted\n",
		len(r.ops), statuses[stOK], allowed, denied, statuses[stUnknown], statuses[stFail], statuses[stUnexpected], r.admitted)
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(10 * time.Microsecond) }
		fmt.Fprintf(&b, "answered latency: p50 %v, p99 %v, max %v\n", q(0.5), q(0.99), q(1))
	}
	zero := 0
	for _, k := range r.keys {
		if k.Zero {
			zero++
		}
	}
	fmt.Fprintf(&b, "keys %d (%d zero-refill); linearizability: %d keys, %d ops: %d ok, %d inconclusive, %d illegal (%v)\n",
		len(r.keys), zero, r.lin.keys, r.lin.ops, r.lin.ok, r.lin.unknown, r.lin.illegal, r.lin.elapsed.Round(time.Millisecond))
	if c.shards > 1 {
		b.WriteString(r.perGroup(c.shards))
	}
	if r.digest != "" {
		fmt.Fprintf(&b, "replicas at %s: %s\n", appliedAt(r.index), r.digest)
	}
	for _, v := range r.violations {
		fmt.Fprintf(&b, "VIOLATION %s\n", v)
	}
	return b.String()
}

// appliedAt renders the groups' applied indexes: "applied index 7" with one
// group, "applied indexes 7 (group 0), 9 (group 1)" with several.
func appliedAt(idx []uint64) string {
	if len(idx) == 1 {
		return fmt.Sprintf("applied index %d", idx[0])
	}
	parts := make([]string, len(idx))
	for g, i := range idx {
		parts[g] = fmt.Sprintf("%d (group %d)", i, g)
	}
	return "applied indexes " + strings.Join(parts, ", ")
}

// perGroup renders how the keys and operations spread over the groups.
func (r *report) perGroup(groups int) string {
	keys, zero, ops := make([]int, groups), make([]int, groups), make([]int, groups)
	for _, k := range r.keys {
		keys[k.Group]++
		if k.Zero {
			zero[k.Group]++
		}
	}
	for i := range r.ops {
		ops[r.keys[r.ops[i].Key].Group]++
	}
	var b strings.Builder
	b.WriteString("per group:")
	for g := range groups {
		if g > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %d: %d keys (%d zero-refill), %d operations", g, keys[g], zero[g], ops[g])
	}
	b.WriteString("\n")
	return b.String()
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
