package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Report is everything a suite run measured.
type Report struct {
	Command  string          `json:"command"`
	Started  time.Time       `json:"started"`
	Finished time.Time       `json:"finished"`
	Machine  Machine         `json:"machine"`
	Options  SuiteOptions    `json:"options"`
	Cases    []CaseResult    `json:"cases"`
	Memory   []MemorySeries  `json:"memory"`
	Keys     []MemorySeries  `json:"keys"`
	Accuracy *AccuracyResult `json:"accuracy,omitempty"`
	// MemoryFromSweep says the memory figures come from the key-count sweep.
	MemoryFromSweep bool              `json:"memory_from_sweep"`
	Calibration     []Calibration     `json:"calibration,omitempty"`
	Goals           []GoalResult      `json:"goals"`
	Engine          string            `json:"engine_benchmarks,omitempty"`
	Charts          map[string]string `json:"-"` // file name -> SVG
}

// Goal outcomes.
const (
	GoalPass        = "pass"
	GoalFallsShort  = "falls short"
	GoalNotMeasured = "not measured"
)

// GoalResult is one of the goals with its outcome.
type GoalResult struct {
	Goal     string  `json:"goal"`
	Want     string  `json:"want"`
	Measured string  `json:"measured"`
	Ratio    float64 `json:"ratio"`
	Status   string  `json:"status"`
}

func (r *Report) caseByID(id string) (CaseResult, bool) {
	for _, c := range r.Cases {
		if c.Case.ID == id {
			return c, true
		}
	}
	return CaseResult{}, false
}

func series(ss []MemorySeries, target string) (MemorySeries, bool) {
	for _, s := range ss {
		if s.Target == target {
			return s, true
		}
	}
	return MemorySeries{}, false
}

// EvaluateGoals fills r.Goals from the measurements.
func (r *Report) EvaluateGoals() {
	r.Goals = nil
	ratioGoal := func(goal, caseID, target string, want float64) {
		g := GoalResult{Goal: goal, Want: fmt.Sprintf(">= %gx", want), Status: GoalNotMeasured}
		if cr, ok := r.caseByID(caseID); ok {
			a, b := cr.Run(target), cr.Run(cr.Case.Baseline)
			switch {
			case a == nil || !a.OK():
				g.Measured = target + " " + runProblem(a)
			case b == nil || !b.OK():
				g.Measured = cr.Case.Baseline + " " + runProblem(b)
			default:
				g.Ratio = cr.Ratio(target)
				g.Measured = fmt.Sprintf("%.2fx (%s/s against %s/s)", g.Ratio, FormatCount(a.Median.Throughput), FormatCount(b.Median.Throughput))
				if a.Median.ServerCPU > 0 && b.Median.ServerCPU > 0 {
					g.Measured += fmt.Sprintf("; server CPU per request %s against %s", cpuCell(a.Median.ServerCPU), cpuCell(b.Median.ServerCPU))
				}
				g.Status = passIf(g.Ratio >= want)
				if c := cr.Run(TargetRedisEcho); c != nil && c.OK() && b.Median.Throughput > 0 {
					g.Measured += fmt.Sprintf("; ceiling (%s: Redis answering ECHO, no limiter) %s/s, %.2fx",
						TargetRedisEcho, FormatCount(c.Median.Throughput), c.Median.Throughput/b.Median.Throughput)
				}
				if a.Median.Errors > 0 {
					g.Measured += fmt.Sprintf("; %d error replies", a.Median.Errors)
					g.Status = GoalFallsShort
				}
			}
		}
		r.Goals = append(r.Goals, g)
	}
	ratioGoal("single node in memory against Redis+Lua token bucket, P16", "goal-p16", TargetSluiceMem, 3)
	ratioGoal("single node in memory against Redis+Lua token bucket, P1", "goal-p1", TargetSluiceMem, 1.5)
	ratioGoal("durable three-node cluster against Redis+Lua token bucket, P16 (connections spread over the nodes)", "goal-p16", TargetSluiceCluster, 1)
	ratioGoal("durable three-node cluster against Redis+Lua token bucket, P16 (connections on the leader, as one redis-benchmark)", "goal-p16", TargetSluiceClusterLeader, 1)
	ratioGoal("durable three-node cluster against Redis+Lua token bucket, P1 (connections spread over the nodes)", "goal-p1", TargetSluiceCluster, 1)

	g := GoalResult{Goal: fmt.Sprintf("RSS per live key against Redis's (%s token buckets)", FormatCount(float64(r.Options.MemoryKeys))), Want: "<= 0.5x", Status: GoalNotMeasured}
	s, ok1 := series(r.Memory, TargetSluiceMem)
	rd, ok2 := series(r.Memory, TargetRedis)
	switch {
	case !ok1 || !ok2:
	case len(s.Points) == 0:
		g.Measured = "sluice: " + firstNonEmpty(s.Unavailable, s.Err, "no figure")
	case len(rd.Points) == 0:
		g.Measured = "redis: " + firstNonEmpty(rd.Unavailable, rd.Err, "no figure")
	default:
		sp, rp := s.Last(), rd.Last()
		if rp.PerKey > 0 {
			g.Ratio = sp.PerKey / rp.PerKey
			g.Measured = fmt.Sprintf("%.2fx (%.0f B/key against %.0f B/key)", g.Ratio, sp.PerKey, rp.PerKey)
			g.Status = passIf(g.Ratio <= 0.5)
		}
	}
	r.Goals = append(r.Goals, g)

	g = GoalResult{Goal: "throughput at 10M keys against at 1k keys (sluice in memory, P16)", Want: ">= 0.8x", Status: GoalNotMeasured}
	if s, ok := series(r.Keys, TargetSluiceMem); ok {
		sc := s.Scale
		switch {
		case sc != nil && sc.Err == "" && sc.Ratio > 0:
			m := fmt.Sprintf("%.2fx (%s/s with %s keys against %s/s with %s, %d interleaved rounds)", sc.Ratio,
				FormatCount(sc.Large.Throughput), FormatCount(float64(sc.LargeKeys)), FormatCount(sc.Small.Throughput), FormatCount(float64(sc.SmallKeys)), sc.Rounds)
			if sc.LargeKeys >= 10_000_000 && sc.SmallKeys <= 1000 {
				g.Ratio, g.Measured = sc.Ratio, m
				g.Status = passIf(sc.Ratio >= 0.8)
			} else {
				g.Measured = "not run at 10M keys (run with -max-keys 10000000); " + m
			}
		case sc != nil && sc.Err != "":
			g.Measured = "failed: " + shorten(sc.Err, 160)
		default:
			g.Measured = firstNonEmpty(s.Unavailable, s.Err, "not run")
		}
	}
	r.Goals = append(r.Goals, g)
}

func runProblem(r *TargetRun) string {
	if r == nil {
		return "not run"
	}
	if r.Unavailable != "" {
		return "unavailable: " + shorten(r.Unavailable, 160)
	}
	if r.Err != "" {
		return "failed: " + shorten(r.Err, 160)
	}
	return "no figure"
}

func passIf(ok bool) string {
	if ok {
		return GoalPass
	}
	return GoalFallsShort
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// casesWithPrefix returns the cases whose ID starts with prefix, in order.
func (r *Report) casesWithPrefix(prefix string) []CaseResult {
	var out []CaseResult
	for _, c := range r.Cases {
		if strings.HasPrefix(c.Case.ID, prefix) {
			out = append(out, c)
		}
	}
	return out
}

// BuildCharts renders the report's charts into r.Charts.
func (r *Report) BuildCharts() {
	r.Charts = map[string]string{}
	// throughput against connections
	conns := r.casesWithPrefix("conns-")
	if len(conns) > 0 {
		ch := LineChart{Title: "Throughput against connections (RL.TOKEN, P1)", XLabel: "connections", YLabel: "requests/s", LogX: true}
		for _, t := range conns[0].Case.Targets {
			s := Series{Name: t}
			for _, c := range conns {
				if run := c.Run(t); run != nil && run.OK() {
					s.X = append(s.X, float64(c.Case.Conns))
					s.Y = append(s.Y, run.Median.Throughput)
				}
			}
			ch.Series = append(ch.Series, s)
		}
		r.Charts["conns.svg"] = ch.SVG()
	}
	// latency percentiles of the goal cases
	for _, id := range []string{"goal-p16", "goal-p1"} {
		cr, ok := r.caseByID(id)
		if !ok {
			continue
		}
		ch := BarChart{Title: fmt.Sprintf("Latency percentiles (%s)", cr.Case.ID), YLabel: "latency", LogY: true,
			Groups: []string{"p50", "p90", "p99", "p99.9"}, YFormat: func(v float64) string { return FormatNs(int64(v)) }}
		for _, run := range cr.Runs {
			if !run.OK() {
				continue
			}
			l := run.Median.Latency
			ch.Series = append(ch.Series, Series{Name: run.Target, Y: []float64{float64(l.P50), float64(l.P90), float64(l.P99), float64(l.P999)}})
		}
		r.Charts["latency-"+strings.TrimPrefix(id, "goal-")+".svg"] = ch.SVG()
	}
	// memory and throughput against key count
	if len(r.Keys) > 0 {
		mem := LineChart{Title: "Resident memory against live keys", XLabel: "live keys", YLabel: "RSS (MiB)", LogX: true, LogY: true}
		per := LineChart{Title: "RSS per live key against live keys", XLabel: "live keys", YLabel: "bytes per key", LogX: true,
			YFormat: func(v float64) string { return fmt.Sprintf("%g", v) }}
		thr := LineChart{Title: "Throughput against live keys (RL.TOKEN, P16)", XLabel: "live keys", YLabel: "requests/s", LogX: true}
		for _, s := range r.Keys {
			ms, ps, ts := Series{Name: s.Target}, Series{Name: s.Target}, Series{Name: s.Target}
			for _, p := range s.Points {
				ms.X, ms.Y = append(ms.X, float64(p.Keys)), append(ms.Y, float64(p.RSS)/(1<<20))
				if p.Keys >= 100_000 { // below, the server's own baseline drowns the keys

					ps.X, ps.Y = append(ps.X, float64(p.Keys)), append(ps.Y, p.PerKey)
				}
				if p.Throughput > 0 {
					ts.X, ts.Y = append(ts.X, float64(p.Keys)), append(ts.Y, p.Throughput)
				}
			}
			mem.Series, per.Series, thr.Series = append(mem.Series, ms), append(per.Series, ps), append(thr.Series, ts)
		}
		r.Charts["memory.svg"] = mem.SVG()
		r.Charts["memory-per-key.svg"] = per.SVG()
		r.Charts["keys-throughput.svg"] = thr.SVG()
	}
}

// stamp is the line under each section's heading that says which run
// measured it: when, which sluice (its commit), how many rounds (0: one
// run, no rounds).
func (r *Report) stamp(rounds int) string {
	sluice := "sluice unknown"
	if f := strings.Fields(r.Machine.Sluice); len(f) > 0 {
		sluice = "sluice " + f[0]
	}
	runs := "one run"
	if rounds == 1 {
		runs = "1 round"
	} else if rounds > 1 {
		runs = fmt.Sprintf("%d rounds", rounds)
	}
	return fmt.Sprintf("*Measured %s, %s, %s.*\n\n", r.Started.UTC().Format("2006-01-02 15:04 MST"), sluice, runs)
}

// Markdown renders the report; charts are linked under chartDir.
func (r *Report) Markdown(chartDir string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	// section opens a section measured by this run: its heading, then its
	// stamp.
	section := func(title string, rounds int) { p("## %s\n\n%s", title, r.stamp(rounds)) }
	img := func(name, alt string) {
		if _, ok := r.Charts[name]; ok {
			p("![%s](%s)\n\n", alt, filepath.ToSlash(filepath.Join(chartDir, name)))
		}
	}
	p("# sluice benchmarks\n\n")
	p("Measured by `%s` on %s, in %s. Every server ran on this machine, on 127.0.0.1, next to the load generator.\n\n",
		r.Command, r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Finished.Sub(r.Started).Round(time.Second))
	p("This page is written only by `make bench-doc` (`bench.Report.WriteDoc`), each section stamped with the run that measured it; measurements and notes written by hand live in [notes/](notes/), dated.\n\n")
	m := r.Machine
	p("## Machine\n\n| | |\n|---|---|\n")
	p("| cores (nproc) | %d |\n| CPU | %s |\n| memory | %s |\n| kernel | %s |\n| Go | %s |\n| redis-server | %s |\n",
		m.NProc, m.CPUModel, FormatBytes(m.MemTotal), m.Kernel, m.GoVersion, m.RedisVersion)
	if m.Sluice != "" {
		p("| sluice | %s |\n", mdEscape(m.Sluice))
	}
	p("| durable targets' data | %s (%s) |\n", m.DataDir, m.DataFS)
	p("| load average before the run | %.2f |\n", m.LoadStart)
	if m.OtherCPU >= 0 {
		p("| CPU used by other processes during the run | %.0f core-seconds, %.0f%% of the machine |\n", m.OtherCPU, m.OtherShare*100)
	}
	p("\n")
	// The measured share decides when there is one: the load average
	// before the run also counts what ran just before it (make bench-doc's
	// engine benchmarks).
	if (m.OtherCPU >= 0 && m.OtherShare > 0.1) || (m.OtherCPU < 0 && m.LoadStart > 1) {
		p("> **Shared machine.** Other processes used a good part of the CPU while these figures were taken: absolute figures are low and noisy, and the ratios less reliable than on an idle machine. Re-run `make bench` on a quiet machine.\n\n")
	}

	if len(r.Goals) > 0 {
		section("Goals", r.Options.Rounds)
		p("| goal | want | measured | result |\n|---|---|---|---|\n")
		for _, g := range r.Goals {
			res := g.Status
			if res == GoalPass {
				res = "**pass**"
			}
			p("| %s | %s | %s | %s |\n", g.Goal, g.Want, mdEscape(g.Measured), res)
		}
		p("\nThe Redis+Lua baseline of the goals is `redis-anchor`: the anchor script `bench/lua/anchor_token_bucket.lua` (what users run today; it replies 1 or 0). `redis` runs `bench/lua/token_bucket.lua`, which does the same in the same hash but replies the same five integers as sluice (in the `alg-*` and variant cases). `redis-echo` is the same redis-server answering `ECHO key`, no limiter at all: at pipeline 1 its throughput is the ceiling that the load generator and the machine allow any server, limiter or not.\n\n")
	}

	if len(r.Cases) > 0 {
		section("Throughput and latency", r.Options.Rounds)
		p("Medians over the rounds; rounds alternate between the targets (A B A B). Latency is per request, from the write of its pipelined batch to its reply, so at P16 it includes the wait behind the batch. *Server CPU per request* is the CPU time (user + system, all threads, from /proc/PID/stat) the server's processes used in the measured phase over the requests answered: what a request costs, less sensitive to a busy machine than throughput (for the cluster, the three nodes together).\n\n")
		for _, cr := range r.Cases {
			if strings.HasPrefix(cr.Case.ID, "conns-") || strings.HasPrefix(cr.Case.ID, "durability-") {
				continue
			}
			r.caseTable(&b, cr)
		}
		img("latency-p16.svg", "latency percentiles at P16")
		img("latency-p1.svg", "latency percentiles at P1")
	}

	durability := r.casesWithPrefix("durability-")
	if len(durability) > 0 {
		section("Log stores and durability modes", durability[0].Case.Rounds)
		p("The durable three-node cluster with every connection on its leader, started with `--raft-log <store> --fsync <mode>`: `sluice-cluster-leader-wal-everysec` is `--raft-log wal --fsync everysec`. *Server CPU per request* is the three nodes' CPU together; *ops per log entry* is how many operations an average Raft entry carried (the nodes' `sluice_raft_committed_ops_total` over `sluice_raft_committed_entries_total`, over the measured phase); *commit per entry* is the mean time from handing an entry to Raft to its outcome on the leader (`sluice_raft_commit_duration_seconds`), *hold per entry* the mean time an entry's first request waited in the leader's batcher before that (`sluice_batch_hold_duration_seconds`). Run just these rows with `sluice-bench -sections durability` (README: Durability says what each mode promises).\n\n")
		for _, cr := range durability {
			durabilityTable(&b, cr)
		}
	}

	conns := r.casesWithPrefix("conns-")
	if len(conns) > 0 {
		section("Throughput against connections", conns[0].Case.Rounds)
		img("conns.svg", "throughput against connections")
		p("| connections |")
		for _, t := range conns[0].Case.Targets {
			p(" %s |", t)
		}
		p(" ratio |\n|---|")
		for range conns[0].Case.Targets {
			p("---|")
		}
		p("---|\n")
		for _, c := range conns {
			p("| %d |", c.Case.Conns)
			for _, t := range c.Case.Targets {
				p(" %s |", cellThroughput(c.Run(t)))
			}
			p(" %s |\n", ratioCell(c.Ratio(TargetSluiceMem)))
		}
		p("\n")
	}

	if len(r.Calibration) > 0 {
		section("Load generator check", 0)
		p("The same token-bucket workload (%d connections, uniform over %d keys named `tb:` + 12 digits) measured by this tool's client and by `redis-benchmark -c %d -r %d -P <P>`, one after the other against the same server. Where the two agree, the client is not what limits the figures above.\n\n", r.Options.Conns, r.Options.Keys, r.Options.Conns, r.Options.Keys)
		p("| target | pipeline | sluice-bench | redis-benchmark | ratio |\n|---|---|---|---|---|\n")
		for _, c := range r.Calibration {
			if c.Err != "" {
				p("| %s | P%d | %s | %s | |\n", c.Target, c.Pipeline, countOrDash(c.ThisClient), mdEscape(shorten(c.Err, 160)))
				continue
			}
			p("| %s | P%d | %s/s | %s/s | %.2f |\n", c.Target, c.Pipeline, FormatCount(c.ThisClient), FormatCount(c.RedisBenchmark), c.ThisClient/c.RedisBenchmark)
		}
		p("\n")
	}

	if len(r.Memory) > 0 {
		section("Memory per live key", 0)
		p("RSS (VmRSS of /proc/PID/status) of a fresh server, then after creating live token buckets (`tb:` + 12 digits, capacity 2^40, refilling one token an hour, so none is back at its initial state). `used_memory` is INFO's figure where the server has one.")
		if r.MemoryFromSweep {
			p(" Taken from the key-count sweep below: the keys were created in steps, with a short load between the steps, so the RSS also holds what those loads left (connection buffers: well under 1%% of the total at 1M keys).")
		}
		p("\n\n")
		p("| target | keys | RSS before | RSS after | RSS per key | used_memory per key | DBSIZE |\n|---|---|---|---|---|---|---|\n")
		for _, s := range r.Memory {
			if len(s.Points) == 0 {
				p("| %s | | | | %s | | |\n", s.Target, mdEscape(shorten(firstNonEmpty(s.Unavailable, s.Err, "no figure"), 160)))
				continue
			}
			pt := s.Last()
			um := "n/a"
			if pt.UsedMemory > 0 {
				um = fmt.Sprintf("%.0f B", float64(pt.UsedMemory)/float64(pt.Keys))
			}
			p("| %s | %d | %s | %s | **%.0f B** | %s | %d |\n", s.Target, pt.Keys, FormatBytes(pt.BaseRSS), FormatBytes(pt.RSS), pt.PerKey, um, pt.DBSize)
		}
		p("\n")
	}

	if len(r.Keys) > 0 {
		section("Against the number of live keys", 0)
		p("One fresh server per target; at each step keys are added up to the count, the RSS read, then RL.TOKEN (or the token script) runs for the run length with %d connections at P16, uniform over the keys that exist.\n\n", r.Options.Conns)
		img("memory.svg", "RSS against live keys")
		img("memory-per-key.svg", "RSS per key against live keys")
		img("keys-throughput.svg", "throughput against live keys")
		p("| target | keys | RSS | RSS per key | throughput | p99 |\n|---|---|---|---|---|---|\n")
		for _, s := range r.Keys {
			if len(s.Points) == 0 {
				p("| %s | | | %s | | |\n", s.Target, mdEscape(shorten(firstNonEmpty(s.Unavailable, s.Err, "no figure"), 160)))
				continue
			}
			for _, pt := range s.Points {
				p("| %s | %s | %s | %.0f B | %s/s | %s |\n", s.Target, FormatCount(float64(pt.Keys)), FormatBytes(pt.RSS), pt.PerKey, FormatCount(pt.Throughput), FormatNs(pt.Latency.P99))
			}
			if s.Err != "" {
				p("| %s | | | %s | | |\n", s.Target, mdEscape(shorten(s.Err, 160)))
			}
		}
		p("\n")
		for _, s := range r.Keys {
			if sc := s.Scale; sc != nil && sc.Err == "" {
				p("Scaling, measured apart from the sweep: a second %s holding %s keys ran next to the sweep's instance holding %s, and the two were loaded in %d interleaved rounds of %s (%d connections, P16): **%s/s against %s/s, %.2fx** (p99 %s against %s).\n\n",
					s.Target, FormatCount(float64(sc.SmallKeys)), FormatCount(float64(sc.LargeKeys)), sc.Rounds, r.Options.Duration, r.Options.Conns,
					FormatCount(sc.Large.Throughput), FormatCount(sc.Small.Throughput), sc.Ratio, FormatNs(sc.Large.Latency.P99), FormatNs(sc.Small.Latency.P99))
			}
		}
	}

	if a := r.Accuracy; a != nil {
		section("Accuracy of the sliding window counter", 0)
		if a.Unavailable != "" || a.Err != "" {
			p("Not measured: %s\n\n", mdEscape(firstNonEmpty(a.Unavailable, a.Err)))
		} else {
			o := a.Options
			p("The same arrivals go to an `RL.SLIDING` key and an `RL.LOG` key (the exact sliding log) with the same limit (%d per %s), through the wire to a sluice started with `--enable-debug-command` whose clock is frozen (`DEBUG CLOCK FREEZE %d`) and moved with `DEBUG TIMEWARP`. %d keys per pattern, %d windows; the keys' request rates spread log-uniformly from 1/4 to 4 times the limit. A request is *decided differently* when one admits it and the other denies it.\n\n",
				o.Limit, o.Window, int64(FreezeAt), o.Keys, o.Windows)
			p("| traffic | requests | decided differently | counter admits, log denies | counter denies, log admits | keys under 0.9x the limit | at 0.9x-1.1x | over 1.1x |\n|---|---|---|---|---|---|---|---|\n")
			rows := append([]AccuracyPattern{}, a.Patterns...)
			rows = append(rows, a.Total)
			for _, pt := range rows {
				name := pt.Name
				if pt.About != "" {
					name += " (" + pt.About + ")"
				}
				p("| %s | %d | **%s** | %d | %d | %s | %s | %s |\n", name, pt.Requests, pct(pt.Share), pt.FalseAllow, pt.FalseDeny,
					pct(pt.Bands[BandUnder].Share()), pct(pt.Bands[BandAt].Share()), pct(pt.Bands[BandOver].Share()))
			}
			p("\nCloudflare reported 0.003%% of 4 billion requests decided differently, on real traffic where nearly every client stays far below its limit. This traffic is built to sit near and above the limit, where the two algorithms admit about the same number of requests but not the same ones: a key sent twice its limit gets half its requests admitted by both, the log in runs as old entries expire, the counter spread over the window. Compare the two error columns: the counter errs about as often towards denying as towards admitting.\n\n")
		}
	}

	if r.Engine != "" {
		section("Engine micro-benchmarks", 0)
		p("```\n%s\n```\n\n", strings.TrimSpace(r.Engine))
	}

	p("## Reproduce\n\n")
	p("Needs Go, and `redis-server` 7 (with `redis-benchmark` for the client check) on PATH.\n\n")
	p("```sh\n")
	p("make bench        # engine micro-benchmarks, then this suite (under 5 minutes on 2 cores): results/report.md\n")
	p("go run ./cmd/sluice-bench -suite full -max-keys 10000000     # 10 s runs, 5 rounds, up to 10M keys\n")
	p("go run ./cmd/sluice-bench -target sluice-mem,redis -workload sliding -dist zipf -deny 0.1 -cost 2 -conns 50 -pipeline 16 -duration 5s\n")
	p("go run ./cmd/sluice-bench -sections durability -sluice-bin bin/sluice   # only the log store and durability mode rows (about 2 minutes)\n")
	p("go run ./cmd/sluice-bench -render results/results.json -doc docs/benchmarks.md   # re-render a saved run\n")
	p("```\n\n")
	p("## Method\n\n")
	p("- The load generator is `cmd/sluice-bench` over `bench/`: its own pipelined RESP client (one goroutine per connection writes P requests in one write, then reads P replies), no third-party client. Each request's latency goes into a log-bucketed histogram (under 1%% error).\n")
	p("- The servers are started by the tool on free 127.0.0.1 ports: `sluice --in-memory`; `sluice --data-dir <temp>`; three `sluice --id nX ... --peers ...` nodes with temporary data directories, connections spread round-robin over the three (followers forward to the leader); `redis-server --save \"\" --appendonly no` with the scripts of `bench/lua/` loaded by SCRIPT LOAD and called by EVALSHA.\n")
	p("- Every run starts from FLUSHALL and a %s warm-up. Limits are set so that nothing is denied unless the case says so; a denied share is made by sending that share of requests to keys whose limit was used up before the run.\n", r.Options.Warmup)
	p("- Run length: %s per goal run, %d rounds; %s per other run.\n", r.Options.Duration, r.Options.Rounds, r.Options.ShortDuration)
	p("- The load generator runs on the same cores as the servers: every request costs CPU on both sides, and at P1 the system calls of the round trips dominate. `redis-benchmark` is run against the same servers in the load generator check as a cross-check.\n")
	p("- On a machine shared with other work, a target made of several processes (the three-node cluster) gets a larger share of the CPU from the kernel's fair scheduler than a single process does, which can put it ahead of the single node; the server CPU per request does not depend on that share.\n")
	p("- Redis runs without persistence (`--save \"\" --appendonly no`), except the `redis-aof` target (`--appendonly yes --appendfsync always`: every write on disk before its reply); `sluice-durable` and the cluster write their data to disk.\n")
	return b.String()
}

func (r *Report) caseTable(b *strings.Builder, cr CaseResult) {
	cols := []string{"p50", "p90", "p99", "p99.9", "max", "server CPU per request", "denied"}
	if !cr.hasLogStats() {
		writeCaseTable(b, cr, cols, func(m *LoadResult) []string {
			return []string{FormatNs(m.Latency.P50), FormatNs(m.Latency.P90), FormatNs(m.Latency.P99),
				FormatNs(m.Latency.P999), FormatNs(m.Latency.Max), cpuCell(m.ServerCPU), pct(m.DenyShare())}
		})
		return
	}
	// A Raft cluster among the targets: its group commit figures too.
	writeCaseTable(b, cr, append(cols, logStatsCols...), func(m *LoadResult) []string {
		return append([]string{FormatNs(m.Latency.P50), FormatNs(m.Latency.P90), FormatNs(m.Latency.P99),
			FormatNs(m.Latency.P999), FormatNs(m.Latency.Max), cpuCell(m.ServerCPU), pct(m.DenyShare())}, logStatsCells(m)...)
	})
}

// hasLogStats reports whether any target of the case measured its group
// commit (a Raft cluster).
func (cr CaseResult) hasLogStats() bool {
	for _, run := range cr.Runs {
		if run.Median.OpsPerEntry > 0 {
			return true
		}
	}
	return false
}

// logStatsCols are the group commit columns: ops per entry, and the mean
// commit and hold times per entry on the leader.
var logStatsCols = []string{"ops per log entry", "commit per entry", "hold per entry"}

// logStatsCells are a run's cells under logStatsCols, blank where not
// measured.
func logStatsCells(m *LoadResult) []string {
	cells := make([]string, 3)
	if m.OpsPerEntry > 0 {
		cells[0] = fmt.Sprintf("%.1f", m.OpsPerEntry)
	}
	if m.CommitTime > 0 {
		cells[1] = FormatNs(int64(m.CommitTime))
	}
	if m.HoldTime > 0 {
		cells[2] = FormatNs(int64(m.HoldTime))
	}
	return cells
}

// durabilityTable is a case's table with the group commit figures.
func durabilityTable(b *strings.Builder, cr CaseResult) {
	writeCaseTable(b, cr, append([]string{"p50", "p99", "server CPU per request"}, logStatsCols...), func(m *LoadResult) []string {
		return append([]string{FormatNs(m.Latency.P50), FormatNs(m.Latency.P99), cpuCell(m.ServerCPU)}, logStatsCells(m)...)
	})
}

// writeCaseTable writes cr's heading and its table, a row per target: the
// target, its throughput and its ratio to the baseline, then cols, whose
// cells cells gives from a finished run's median, then its errors. A run
// that did not finish gets its problem in the throughput cell.
func writeCaseTable(b *strings.Builder, cr CaseResult, cols []string, cells func(m *LoadResult) []string) {
	c := cr.Case
	fmt.Fprintf(b, "### %s\n\n`%s`: %s, %d connections, pipeline %d, %d rounds.\n\n", c.Title, c.ID, c.Workload, c.Conns, c.Pipeline, c.Rounds)
	fmt.Fprintf(b, "| target | throughput | vs %s | %s | errors |\n|%s\n", c.Baseline, strings.Join(cols, " | "), strings.Repeat("---|", len(cols)+4))
	for _, run := range cr.Runs {
		if !run.OK() {
			fmt.Fprintf(b, "| %s | %s |%s\n", run.Target, mdEscape(runProblem(&run)), strings.Repeat(" |", len(cols)+2))
			continue
		}
		m := &run.Median
		errs := "0"
		if m.Errors > 0 {
			errs = fmt.Sprintf("%d (%s)", m.Errors, mdEscape(shorten(m.FirstError, 60)))
		}
		row := append([]string{run.Target, FormatCount(m.Throughput) + "/s", ratioCell(cr.Ratio(run.Target))}, cells(m)...)
		fmt.Fprintf(b, "| %s | %s |\n", strings.Join(row, " | "), errs)
	}
	b.WriteString("\n")
}

func cellThroughput(r *TargetRun) string {
	if r == nil || !r.OK() {
		return mdEscape(runProblem(r))
	}
	return FormatCount(r.Median.Throughput) + "/s"
}

func cpuCell(ns float64) string {
	if ns <= 0 {
		return ""
	}
	return fmt.Sprintf("%.1f µs", ns/1000)
}

func countOrDash(v float64) string {
	if v <= 0 {
		return "-"
	}
	return FormatCount(v) + "/s"
}

func ratioCell(v float64) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf("%.2fx", v)
}

func pct(v float64) string {
	switch {
	case v == 0:
		return "0%"
	case v < 0.001:
		return fmt.Sprintf("%.4f%%", v*100)
	case v < 0.1:
		return fmt.Sprintf("%.2f%%", v*100)
	}
	return fmt.Sprintf("%.1f%%", v*100)
}

func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	return strings.ReplaceAll(s, "\n", " ")
}

// Write writes report.md, results.json and the charts under dir.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "charts"), 0o755); err != nil {
		return fmt.Errorf("results folder: %w", err)
	}
	if r.Charts == nil {
		r.BuildCharts()
	}
	for name, svg := range r.Charts {
		if err := os.WriteFile(filepath.Join(dir, "charts", name), []byte(svg), 0o644); err != nil {
			return fmt.Errorf("chart: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.Markdown("charts")), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("results.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644); err != nil {
		return fmt.Errorf("results.json: %w", err)
	}
	return nil
}

// WriteDoc writes the Markdown report to path with its charts in chartDir
// (relative to path's folder), for docs/benchmarks.md. It replaces the
// whole file: the page is written only by its generator (make bench-doc),
// every section stamped with the run; notes written by hand live in
// docs/notes/.
func (r *Report) WriteDoc(path, chartDir string) error {
	if r.Charts == nil {
		r.BuildCharts()
	}
	base := filepath.Dir(path)
	if err := os.MkdirAll(filepath.Join(base, chartDir), 0o755); err != nil {
		return fmt.Errorf("doc charts: %w", err)
	}
	for name, svg := range r.Charts {
		if err := os.WriteFile(filepath.Join(base, chartDir, name), []byte(svg), 0o644); err != nil {
			return fmt.Errorf("doc chart: %w", err)
		}
	}
	doc := r.Markdown(chartDir)
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		return fmt.Errorf("doc: %w", err)
	}
	return nil
}
