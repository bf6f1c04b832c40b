// Command sluice-bench measures sluice against Redis running Lua scripts:
// it starts the servers itself on 127.0.0.1, drives them with a pipelined
// RESP client, and writes the results as JSON (results.json), as Go
// benchmark lines for benchstat (bench.txt, also printed on stdout) and as
// a Markdown page with SVG charts rendered from the JSON (report.md).
//
// With no workload flags it runs the suite (about four minutes on two
// cores; -sections chooses its parts). With -workload or -target it runs
// one case:
//
//	sluice-bench -target sluice-mem,redis -workload log -dist zipf -conns 50 -pipeline 16 -duration 5s
//
// With -render it runs nothing and renders a saved results.json again.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-rl/sluice/bench"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the flags: the suite's options, and the single case when
// -workload or -target is given.
type options struct {
	suite                                  bench.SuiteOptions
	single                                 *bench.Case
	out, doc, sluiceBin, redisBin, workDir string
	engineBench, render                    string
	logLevel                               slog.Level
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	so, w, l := &o.suite, bench.Workload{}, bench.LoadOptions{}
	var targets, workload, dist, sections string
	fs := flag.NewFlagSet("sluice-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&targets, "target", "", "run one case on these targets (comma-separated): "+strings.Join(bench.TargetNames(), ", "))
	fs.StringVar(&workload, "workload", "", "run one case of this workload: token, leaky, fixed, sliding, log, all3 (RL.ALL of three token buckets: user, tenant, shared key), or incr-expire (envoyproxy/ratelimit's INCRBY+EXPIRE pipeline, the same commands on every target)")
	fs.StringVar(&dist, "dist", "uniform", "key distribution of a single case: uniform, zipf or hot")
	fs.Uint64Var(&so.Keys, "keys", 100_000, "distinct keys")
	fs.IntVar(&so.Conns, "conns", 50, "connections")
	fs.IntVar(&l.Pipeline, "pipeline", 16, "requests per pipelined batch (single case)")
	fs.DurationVar(&l.Duration, "duration", 0, "measured length of each run (default 3s for a single case; in the suite 2s for the goal runs, half as long for the others)")
	fs.Int64Var(&l.Requests, "requests", 0, "end each run of a single case after this many requests instead of a duration")
	fs.DurationVar(&so.Warmup, "warmup", 0, "unmeasured load before each run (default 500ms)")
	fs.IntVar(&so.Rounds, "rounds", 0, "rounds, alternating between targets (default 3)")
	fs.Float64Var(&w.DenyShare, "deny", 0, "share of requests (0..1) sent to keys whose limit is used up (single case)")
	fs.Int64Var(&w.Cost, "cost", 1, "units per request, COST n (single case)")
	fs.StringVar(&sections, "sections", "", "run only these suite sections (comma-separated), or all: "+strings.Join(bench.Sections(), ", ")+" (default: all but durability; -sections durability runs only the log store and fsync mode rows; the sliding window accuracy, once -sections accuracy, comes from -engine-bench)")
	fs.Uint64Var(&so.MaxKeys, "max-keys", 0, "largest key count of the key-count sweep (default 1M; 10000000 for the 10M goal)")
	fs.Uint64Var(&so.MemoryKeys, "memory-keys", 1_000_000, "live keys of the memory-per-key figure, a point of the key-count sweep (which goes on to it when it is above -max-keys)")
	fs.StringVar(&o.out, "out", "results", "results folder (report.md, results.json, charts/)")
	fs.StringVar(&o.doc, "doc", "", "also write the report to this Markdown file, charts in a folder next to it (e.g. docs/benchmarks.md)")
	fs.StringVar(&o.sluiceBin, "sluice-bin", "bin/sluice", "sluice binary (make build)")
	fs.StringVar(&o.redisBin, "redis-bin", "redis-server", "redis-server binary")
	fs.StringVar(&o.workDir, "work-dir", "", "parent folder of the servers' temporary data (default: the system's temp dir); durable figures depend on its file system")
	fs.StringVar(&o.engineBench, "engine-bench", "", "file with `go test -bench ./engine/` output to include in the report; its BenchmarkSlidingAccuracy lines make the accuracy section")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelWarn, "debug, info, warn or error")
	fs.StringVar(&o.render, "render", "", "run nothing: render the report of a saved results.json again (into -out, and -doc if given)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	// Every bad flag is named.
	var errs []error
	check := func(flag string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("-%s: %w", flag, err))
		}
	}
	if sections == "all" {
		sections = strings.Join(bench.Sections(), ",")
	}
	for s := range strings.SplitSeq(sections, ",") {
		if s == "" {
			continue
		}
		if !slices.Contains(bench.Sections(), s) {
			check("sections", fmt.Errorf("unknown section %q (want %s)", s, strings.Join(bench.Sections(), ", ")))
		}
		if so.Sections == nil {
			so.Sections = map[string]bool{}
		}
		so.Sections[s] = true
	}
	if so.Conns < 1 || l.Pipeline < 1 || so.Keys < 1 {
		errs = append(errs, errors.New("-conns, -pipeline and -keys: want at least 1"))
	}
	if w.DenyShare < 0 || w.DenyShare > 1 {
		check("deny", fmt.Errorf("want 0 to 1, got %g", w.DenyShare))
	}
	if w.Cost < 1 {
		check("cost", fmt.Errorf("want at least 1, got %d", w.Cost))
	}
	if l.Duration > 0 {
		so.Duration, so.ShortDuration = l.Duration, l.Duration/2
	}
	if workload != "" || targets != "" { // a single case
		var err error
		w.Alg, err = bench.ParseAlgorithm(cmp.Or(workload, string(bench.AlgToken)))
		check("workload", err)
		w.Dist, err = bench.ParseDist(dist)
		check("dist", err)
		ts := strings.Split(cmp.Or(targets, bench.TargetSluiceMem+","+bench.TargetRedis), ",")
		for _, t := range ts {
			if !slices.Contains(bench.TargetNames(), t) {
				check("target", fmt.Errorf("unknown target %q (want one of %s)", t, strings.Join(bench.TargetNames(), ", ")))
			}
		}
		if l.Duration <= 0 && l.Requests <= 0 {
			l.Duration = 3 * time.Second
		}
		so.Defaults()
		so.Duration = l.Duration
		baseline := ts[len(ts)-1] // the first redis target, else the last
		if i := slices.IndexFunc(ts, bench.IsRedis); i >= 0 {
			baseline = ts[i]
		}
		w.Keys, l.Conns, l.Warmup = so.Keys, so.Conns, so.Warmup
		o.single = &bench.Case{ID: "single", Title: fmt.Sprintf("%s, %s keys, %d connections, P%d", w.Alg.Command(), w.Dist, l.Conns, l.Pipeline),
			Workload: w, Load: l, Targets: ts, Rounds: so.Rounds, Baseline: baseline}
	}
	return o, errors.Join(errs...)
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fail := func(code int, err error) int {
		fmt.Fprintln(stderr, "sluice-bench:", err)
		return code
	}
	if err != nil {
		return fail(2, err)
	}
	rep := &bench.Report{}
	var runErr error
	if o.render != "" {
		b, err := os.ReadFile(o.render)
		if err == nil {
			err = json.Unmarshal(b, rep)
		}
		if err != nil {
			return fail(1, fmt.Errorf("-render: %w", err))
		}
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		cfg := bench.ServerConfig{SluiceBin: o.sluiceBin, RedisBin: o.redisBin, WorkDir: o.workDir}
		machine, env := bench.ReadMachine(cfg), bench.NewEnv(cfg)
		r := &bench.Runner{Env: env, Progress: stderr}
		if o.single == nil {
			fmt.Fprintf(stderr, "sluice-bench: suite planned about %s\n", o.suite.PlannedLength().Round(time.Second))
			rep, runErr = r.RunSuite(ctx, o.suite)
		} else {
			rep = &bench.Report{Started: time.Now(), Options: o.suite}
			var cr bench.CaseResult
			cr, runErr = r.RunCase(ctx, *o.single)
			rep.Cases, rep.Finished = []bench.CaseResult{cr}, time.Now()
		}
		if rep.Finished.IsZero() {
			rep.Finished = time.Now()
		}
		if err := env.Close(); err != nil {
			slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel})).Warn("stopping servers", "err", err)
		}
		rep.Machine, rep.Command = machine, "sluice-bench "+strings.Join(args, " ")
	}
	if o.engineBench != "" {
		if b, err := os.ReadFile(o.engineBench); err != nil {
			fmt.Fprintln(stderr, "sluice-bench: -engine-bench:", err)
		} else {
			rep.Engine = string(b)
		}
	}
	if err := rep.Write(o.out); err != nil {
		return fail(1, err)
	}
	if o.doc != "" {
		if err := rep.WriteDoc(o.doc, strings.TrimSuffix(filepath.Base(o.doc), filepath.Ext(o.doc))); err != nil {
			return fail(1, err)
		}
	}
	fmt.Fprint(stdout, rep.Benchfmt())
	fmt.Fprintf(stderr, "report: %s\n", filepath.Join(o.out, "report.md"))
	if runErr != nil {
		return fail(1, runErr)
	}
	return 0
}
