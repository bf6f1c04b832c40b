package bench

import (
	"cmp"
	"embed"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// Report is everything a suite run measured: results.json, from which the
// benchmark lines (Benchfmt), the Markdown page (Markdown, from
// benchmarks.md.tmpl) and the charts (Charts) are all derived, so that a
// saved run renders again alike.
type Report struct {
	Command  string         `json:"command"`
	Started  time.Time      `json:"started"`
	Finished time.Time      `json:"finished"`
	Machine  Machine        `json:"machine"`
	Options  SuiteOptions   `json:"options"`
	Cases    []CaseResult   `json:"cases"`
	Memory   []MemorySeries `json:"memory"`
	Keys     []MemorySeries `json:"keys"`
	// MemoryFromSweep says the memory figures come from the key-count sweep.
	MemoryFromSweep bool   `json:"memory_from_sweep"`
	Engine          string `json:"engine_benchmarks,omitempty"`
}

// AccuracyRow is a BenchmarkSlidingAccuracy line: a traffic pattern's
// figures by unit.
type AccuracyRow struct {
	Name    string
	Figures map[string]float64
}

// Accuracy parses the BenchmarkSlidingAccuracy lines out of Engine (`go
// test -bench ./engine/`'s output: "BenchmarkSlidingAccuracy/<name>-N
// <iterations> <value> <unit> ..."), the first of each name: the page's
// accuracy section.
func (r *Report) Accuracy() []AccuracyRow {
	var rows []AccuracyRow
	for _, line := range strings.Split(r.Engine, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkSlidingAccuracy/") {
			continue
		}
		name := strings.TrimPrefix(f[0], "BenchmarkSlidingAccuracy/")
		if i := strings.LastIndexByte(name, '-'); i > 0 && strings.Trim(name[i+1:], "0123456789") == "" {
			name = name[:i] // the GOMAXPROCS suffix
		}
		if slices.ContainsFunc(rows, func(r AccuracyRow) bool { return r.Name == name }) {
			continue
		}
		row := AccuracyRow{Name: name, Figures: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				row.Figures[f[i+1]] = v
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// Goal outcomes.
const (
	GoalPass        = "pass"
	GoalFallsShort  = "falls short"
	GoalNotMeasured = "not measured"
)

// GoalResult is a goal with what was measured.
type GoalResult struct {
	Goal
	Ratio    float64
	Measured string
	Status   string
}

// Want is the goal's bound as text.
func (g Goal) Want() string {
	if g.Max > 0 {
		return fmt.Sprintf("<= %gx", g.Max)
	}
	return fmt.Sprintf(">= %gx", g.Min)
}

// Goals evaluates the goals of the cases run, then the memory and scale
// goals when their sections ran.
func (r *Report) Goals() []GoalResult {
	var out []GoalResult
	// add appends g's result: measured as ratio, or not measured because
	// of problem.
	add := func(g Goal, ratio float64, measured, problem string) *GoalResult {
		res := GoalResult{Goal: g, Ratio: ratio, Measured: measured, Status: GoalPass}
		switch {
		case problem != "":
			res.Measured, res.Status = problem, GoalNotMeasured
		case (g.Min > 0 && ratio < g.Min) || (g.Max > 0 && ratio > g.Max):
			res.Status = GoalFallsShort
		}
		out = append(out, res)
		return &out[len(out)-1]
	}
	for _, cr := range r.Cases {
		for _, g := range cr.Case.Goals {
			g.About = fmt.Sprintf("%s, P%d", g.About, cr.Case.Pipeline)
			a, b := cr.Run(g.Target), cr.Run(cr.Case.Baseline)
			switch {
			case a == nil || !a.OK():
				add(g, 0, "", g.Target+" "+runProblem(a))
			case b == nil || !b.OK():
				add(g, 0, "", cr.Case.Baseline+" "+runProblem(b))
			default:
				ratio := cr.Ratio(g.Target)
				res := add(g, ratio, fmt.Sprintf("%.2fx (%s/s against %s's %s/s); server CPU per request %s against %s", ratio,
					FormatCount(a.Median.Throughput), cr.Case.Baseline, FormatCount(b.Median.Throughput), cpuCell(a.Median.ServerCPU), cpuCell(b.Median.ServerCPU)), "")
				if a.Median.Errors > 0 {
					res.Measured += fmt.Sprintf("; %d error replies", a.Median.Errors)
					res.Status = GoalFallsShort
				}
			}
		}
	}
	if len(r.Memory) > 0 {
		s, rd := series(r.Memory, TargetSluiceMem), series(r.Memory, TargetRedis)
		sp, rp, problem := s.Last(), rd.Last(), ""
		if sp.PerKey <= 0 || rp.PerKey <= 0 {
			problem = cmp.Or(s.Unavailable, s.Err, rd.Unavailable, rd.Err, "no figure")
		}
		ratio := quot(sp.PerKey, rp.PerKey)
		add(MemoryGoal, ratio, fmt.Sprintf("%.2fx (%.0f B/key against %.0f B/key, %s keys)", ratio, sp.PerKey, rp.PerKey, FormatCount(float64(sp.Keys))), problem)
	}
	if len(r.Keys) > 0 {
		switch sc := series(r.Keys, TargetSluiceMem).Scale; {
		case sc == nil:
			add(ScaleGoal, 0, "", "not run")
		case sc.Err != "" || sc.Ratio <= 0:
			add(ScaleGoal, 0, "", "failed: "+shorten(sc.Err, 160))
		default:
			measured, problem := fmt.Sprintf("%.2fx (%s/s with %s keys against %s/s with %s, %d interleaved rounds)", sc.Ratio,
				FormatCount(sc.Large.Throughput), FormatCount(float64(sc.LargeKeys)), FormatCount(sc.Small.Throughput), FormatCount(float64(sc.SmallKeys)), sc.Rounds), ""
			if sc.LargeKeys < 10_000_000 {
				problem = "not run at 10M keys (-max-keys 10000000): " + measured
			}
			add(ScaleGoal, sc.Ratio, measured, problem)
		}
	}
	return out
}

func series(ss []MemorySeries, target string) MemorySeries {
	for _, s := range ss {
		if s.Target == target {
			return s
		}
	}
	return MemorySeries{Target: target}
}

func runProblem(r *TargetRun) string {
	switch {
	case r == nil:
		return "not run"
	case r.Unavailable != "":
		return "unavailable: " + shorten(r.Unavailable, 160)
	case r.Err != "":
		return "failed: " + shorten(r.Err, 160)
	}
	return "no figure"
}

// CasesIn returns the cases of a part of the page, in order: "conns" and
// "durability" (their ID's prefix), or "main" (every other case).
func (r *Report) CasesIn(part string) []CaseResult {
	var out []CaseResult
	for _, c := range r.Cases {
		p, _, _ := strings.Cut(c.Case.ID, "-")
		if p == part || (part == "main" && p != "conns" && p != "durability") {
			out = append(out, c)
		}
	}
	return out
}

// Benchfmt is the run in Go's benchmark format (bench.txt.tmpl): compare
// two runs with `benchstat old.txt new.txt`.
func (r *Report) Benchfmt() string { return r.render("bench.txt.tmpl", "") }

// Write writes results.json, bench.txt (Benchfmt), report.md and the
// charts under dir.
func (r *Report) Write(dir string) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("results.json: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("results folder: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.txt"), []byte(r.Benchfmt()), 0o644); err != nil {
		return err
	}
	return r.WriteDoc(filepath.Join(dir, "report.md"), "charts")
}

// WriteDoc writes the Markdown page to path, whole, with its charts in
// chartDir (relative to path's folder): docs/benchmarks.md is written only
// this way (make bench-doc).
func (r *Report) WriteDoc(path, chartDir string) error {
	dir := filepath.Join(filepath.Dir(path), chartDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("charts: %w", err)
	}
	for name, svg := range r.Charts() {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(svg), 0o644); err != nil {
			return fmt.Errorf("chart: %w", err)
		}
	}
	return os.WriteFile(path, []byte(r.Markdown(chartDir)), 0o644)
}

// Charts renders the report's charts: file name -> SVG.
func (r *Report) Charts() map[string]string {
	charts := map[string]string{}
	if conns := r.CasesIn("conns"); len(conns) > 0 {
		ch := LineChart{Title: "Throughput against connections (RL.TOKEN, P1)", XLabel: "connections", YLabel: "requests/s"}
		for _, t := range conns[0].Case.Targets {
			s := Series{Name: t}
			for _, c := range conns {
				if run := c.Run(t); run != nil && run.OK() {
					s.X, s.Y = append(s.X, float64(c.Case.Conns)), append(s.Y, run.Median.Throughput)
				}
			}
			ch.Series = append(ch.Series, s)
		}
		charts["conns.svg"] = ch.SVG()
	}
	pcts := []string{"p50", "p90", "p99", "p99.9"}
	for _, cr := range r.CasesIn("goal") {
		ch := LineChart{Title: "Latency percentiles (" + cr.Case.ID + ")", YLabel: "latency", LogY: true,
			XFormat: func(v float64) string { return pcts[min(max(int(v), 0), len(pcts)-1)] },
			YFormat: func(v float64) string { return FormatNs(int64(v)) }}
		for _, run := range cr.Runs {
			if l := run.Median.Latency; run.OK() {
				ch.Series = append(ch.Series, Series{Name: run.Target, X: []float64{0, 1, 2, 3}, Y: []float64{float64(l.P50), float64(l.P90), float64(l.P99), float64(l.P999)}})
			}
		}
		charts["latency-"+strings.TrimPrefix(cr.Case.ID, "goal-")+".svg"] = ch.SVG()
	}
	if len(r.Keys) > 0 {
		mem := LineChart{Title: "Resident memory against live keys", XLabel: "live keys", YLabel: "RSS (MiB)", LogY: true}
		per := LineChart{Title: "RSS per live key against live keys", XLabel: "live keys", YLabel: "bytes per key"}
		thr := LineChart{Title: "Throughput against live keys (RL.TOKEN, P16)", XLabel: "live keys", YLabel: "requests/s"}
		for _, s := range r.Keys {
			ms, ps, ts := Series{Name: s.Target}, Series{Name: s.Target}, Series{Name: s.Target}
			for _, p := range s.Points {
				x := float64(p.Keys)
				ms.X, ms.Y = append(ms.X, x), append(ms.Y, float64(p.RSS)/(1<<20))
				if p.Keys >= 100_000 { // below, the server's own baseline drowns the keys
					ps.X, ps.Y = append(ps.X, x), append(ps.Y, p.PerKey)
				}
				if p.Throughput > 0 {
					ts.X, ts.Y = append(ts.X, x), append(ts.Y, p.Throughput)
				}
			}
			mem.Series, per.Series, thr.Series = append(mem.Series, ms), append(per.Series, ps), append(thr.Series, ts)
		}
		charts["memory.svg"], charts["memory-per-key.svg"], charts["keys-throughput.svg"] = mem.SVG(), per.SVG(), thr.SVG()
	}
	return charts
}

//go:embed benchmarks.md.tmpl bench.txt.tmpl
var templates embed.FS

// Markdown renders the report with benchmarks.md.tmpl, its charts linked
// under chartDir. The page is stamped with the run and the commit that
// made it.
func (r *Report) Markdown(chartDir string) string { return r.render("benchmarks.md.tmpl", chartDir) }

// render executes the template file name on r.
func (r *Report) render(name, chartDir string) string {
	charts := r.Charts()
	num := func(v any) float64 { return reflect.ValueOf(v).Convert(reflect.TypeFor[float64]()).Float() } // any int or float
	t := template.Must(template.New(name).Funcs(template.FuncMap{
		"count": func(v any) string { return FormatCount(num(v)) }, "ns": func(v any) string { return FormatNs(int64(num(v))) },
		"bytes": FormatBytes, "pct": pct, "cpu": cpuCell, "ratio": ratioCell, "problem": runProblem, "short": shorten, "trim": strings.TrimSpace,
		"div":   func(a, b any) float64 { return num(a) / num(b) },
		"cell":  strings.NewReplacer("|", "\\|", "\n", " ").Replace,
		"utc":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 MST") },
		"since": func(a, b time.Time) time.Duration { return b.Sub(a).Round(time.Second) },
		"throughput": func(r *TargetRun) string {
			if r == nil || !r.OK() {
				return runProblem(r)
			}
			return FormatCount(r.Median.Throughput) + "/s"
		},
		"img": func(name, alt string) string {
			if _, ok := charts[name]; !ok {
				return ""
			}
			return fmt.Sprintf("![%s](%s)\n\n", alt, path.Join(chartDir, name))
		},
	}).ParseFS(templates, name))
	var b strings.Builder
	if err := t.Execute(&b, r); err != nil {
		panic(fmt.Sprintf("%s: %v", name, err)) // a bug of the template: TestGoalsAndMarkdown and TestBenchfmt execute them
	}
	return b.String()
}

func cpuCell(ns float64) string {
	if ns <= 0 {
		return ""
	}
	return fmt.Sprintf("%.1f µs", ns/1000)
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
