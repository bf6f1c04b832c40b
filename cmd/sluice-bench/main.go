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

// options are the flags.
type options struct {
	targets, workload, dist, sections      string
	keys, maxKeys, memoryKeys              uint64
	conns, pipeline, rounds                int
	duration, warmup                       time.Duration
	requests, cost                         int64
	deny                                   float64
	out, doc, sluiceBin, redisBin, workDir string
	engineBench, logLevel, render          string
	single                                 bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("sluice-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.targets, "target", "", "run one case on these targets (comma-separated): "+strings.Join(bench.TargetNames(), ", "))
	fs.StringVar(&o.workload, "workload", "", "run one case of this workload: token, leaky, fixed, sliding, log, all3 (RL.ALL of three token buckets: user, tenant, shared key), or incr-expire (envoyproxy/ratelimit's INCRBY+EXPIRE pipeline, the same commands on every target)")
	fs.StringVar(&o.dist, "dist", "uniform", "key distribution of a single case: uniform, zipf or hot")
	fs.Uint64Var(&o.keys, "keys", 100_000, "distinct keys")
	fs.IntVar(&o.conns, "conns", 50, "connections")
	fs.IntVar(&o.pipeline, "pipeline", 16, "requests per pipelined batch (single case)")
	fs.DurationVar(&o.duration, "duration", 0, "measured length of each run (default 3s for a single case; in the suite 2s for the goal runs, half as long for the others)")
	fs.Int64Var(&o.requests, "requests", 0, "end each run of a single case after this many requests instead of a duration")
	fs.DurationVar(&o.warmup, "warmup", 0, "unmeasured load before each run (default 500ms)")
	fs.IntVar(&o.rounds, "rounds", 0, "rounds, alternating between targets (default 3)")
	fs.Float64Var(&o.deny, "deny", 0, "share of requests (0..1) sent to keys whose limit is used up (single case)")
	fs.Int64Var(&o.cost, "cost", 1, "units per request, COST n (single case)")
	fs.StringVar(&o.sections, "sections", "", "run only these suite sections (comma-separated), or all: "+strings.Join(bench.Sections(), ", ")+" (default: all but durability; -sections durability runs only the log store and fsync mode rows)")
	fs.Uint64Var(&o.maxKeys, "max-keys", 0, "largest key count of the key-count sweep (default 1M; 10000000 for the 10M goal)")
	fs.Uint64Var(&o.memoryKeys, "memory-keys", 1_000_000, "live keys of the memory-per-key measurement")
	fs.StringVar(&o.out, "out", "results", "results folder (report.md, results.json, charts/)")
	fs.StringVar(&o.doc, "doc", "", "also write the report to this Markdown file, charts in a folder next to it (e.g. docs/benchmarks.md)")
	fs.StringVar(&o.sluiceBin, "sluice-bin", "bin/sluice", "sluice binary (make build)")
	fs.StringVar(&o.redisBin, "redis-bin", "redis-server", "redis-server binary")
	fs.StringVar(&o.workDir, "work-dir", "", "parent folder of the servers' temporary data (default: the system's temp dir); durable figures depend on its file system")
	fs.StringVar(&o.engineBench, "engine-bench", "", "file with `go test -bench ./engine/` output to include in the report")
	fs.StringVar(&o.logLevel, "log-level", "warn", "debug, info, warn or error")
	fs.StringVar(&o.render, "render", "", "run nothing: render the report of a saved results.json again (into -out, and -doc if given)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.single = o.workload != "" || o.targets != ""
	return o, o.validate()
}

// validate checks the flags, naming each bad one, and fills the single
// case's defaults.
func (o *options) validate() error {
	var errs []error
	check := func(flag string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("-%s: %w", flag, err))
		}
	}
	if o.single {
		o.workload = cmpOr(o.workload, string(bench.AlgToken))
		o.targets = cmpOr(o.targets, bench.TargetSluiceMem+","+bench.TargetRedis)
		_, err := bench.ParseAlgorithm(o.workload)
		check("workload", err)
		_, err = bench.ParseDist(o.dist)
		check("dist", err)
		for _, t := range strings.Split(o.targets, ",") {
			_, err := bench.ParseTarget(t)
			check("target", err)
		}
	}
	if o.sections == "all" {
		o.sections = strings.Join(bench.Sections(), ",")
	}
	for _, s := range strings.Split(o.sections, ",") {
		if s != "" && !slices.Contains(bench.Sections(), s) {
			check("sections", fmt.Errorf("unknown section %q (want %s)", s, strings.Join(bench.Sections(), ", ")))
		}
	}
	if o.conns < 1 || o.pipeline < 1 || o.keys < 1 {
		errs = append(errs, errors.New("-conns, -pipeline and -keys: want at least 1"))
	}
	if o.deny < 0 || o.deny > 1 {
		check("deny", fmt.Errorf("want 0 to 1, got %g", o.deny))
	}
	if o.cost < 1 {
		check("cost", fmt.Errorf("want at least 1, got %d", o.cost))
	}
	return errors.Join(errs...)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
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
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fail(2, fmt.Errorf("-log-level: %w", err))
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
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		machine := bench.ReadMachine(o.redisBin, o.workDir)
		env := bench.NewEnv(bench.ServerConfig{SluiceBin: o.sluiceBin, RedisBin: o.redisBin, WorkDir: o.workDir})
		r := &bench.Runner{Env: env, Progress: stderr}
		if rep, runErr = execute(ctx, o, r, stderr); rep == nil {
			return fail(1, runErr)
		}
		machine.Sluice = env.SluiceVersion(ctx)
		if err := env.Close(); err != nil {
			log.Warn("stopping servers", "err", err)
		}
		rep.Machine, rep.Command = machine, "sluice-bench "+strings.Join(args, " ")
		if rep.Finished.IsZero() {
			rep.Finished = time.Now()
		}
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

// execute runs the single case or the suite.
func execute(ctx context.Context, o *options, r *bench.Runner, stderr io.Writer) (*bench.Report, error) {
	so := bench.DefaultSuiteOptions()
	if o.duration > 0 {
		so.Duration, so.ShortDuration = o.duration, o.duration/2
	}
	if o.warmup > 0 {
		so.Warmup = o.warmup
	}
	if o.rounds > 0 {
		so.Rounds = o.rounds
	}
	if o.maxKeys > 0 {
		so.MaxKeys = o.maxKeys
	}
	so.Conns, so.Keys, so.MemoryKeys = o.conns, o.keys, o.memoryKeys
	if o.sections != "" {
		so.Sections = map[string]bool{}
		for _, s := range strings.Split(o.sections, ",") {
			so.Sections[s] = true
		}
	}
	if !o.single {
		fmt.Fprintf(stderr, "sluice-bench: suite planned about %s\n", so.PlannedLength().Round(time.Second))
		return r.RunSuite(ctx, so)
	}
	alg, _ := bench.ParseAlgorithm(o.workload)
	dist, _ := bench.ParseDist(o.dist)
	targets := strings.Split(o.targets, ",")
	baseline := targets[len(targets)-1] // the first redis target, else the last
	if i := slices.IndexFunc(targets, bench.IsRedis); i >= 0 {
		baseline = targets[i]
	}
	duration := o.duration
	if duration <= 0 && o.requests <= 0 {
		duration = 3 * time.Second
	}
	so.Duration = duration
	c := bench.Case{ID: "single", Title: fmt.Sprintf("%s, %s keys, %d connections, P%d", alg.Command(), dist, o.conns, o.pipeline),
		Workload: bench.Workload{Alg: alg, Keys: o.keys, Dist: dist, DenyShare: o.deny, Cost: o.cost},
		Load:     bench.LoadOptions{Conns: o.conns, Pipeline: o.pipeline, Duration: duration, Requests: o.requests, Warmup: so.Warmup},
		Targets:  targets, Rounds: so.Rounds, Baseline: baseline}
	rep := &bench.Report{Started: time.Now(), Options: so}
	cr, err := r.RunCase(ctx, c)
	rep.Cases, rep.Finished = []bench.CaseResult{cr}, time.Now()
	return rep, err
}
