package bench

import (
	"bytes"
	_ "embed"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// wellFormed fails the test if s is not well-formed XML.
func wellFormed(t *testing.T, name, s string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s: not well-formed XML: %v", name, err)
		}
	}
}

func TestChartsAreWellFormedSVG(t *testing.T) {
	lc := LineChart{Title: "a <b> & c", XLabel: "x", YLabel: "y", LogY: true, Series: []Series{
		{Name: "s1", X: []float64{1, 10, 100, 1000}, Y: []float64{5, 50, 500, 0}},
		{Name: "s2", X: []float64{1, 10}, Y: []float64{3e6, 2e6}},
		{Name: "empty"},
	}}
	svg := lc.SVG()
	wellFormed(t, "line", svg)
	if !strings.Contains(svg, "a &lt;b&gt; &amp; c") || strings.Count(svg, "<polyline") != 2 {
		t.Errorf("line chart: title not escaped or wrong number of lines:\n%s", svg)
	}
	names := []string{"p50", "p99"}
	cat := LineChart{Title: "lat", LogY: true, Series: []Series{{Name: "a", X: []float64{0, 1}, Y: []float64{1e5, 1e6}}},
		XFormat: func(v float64) string { return names[int(v)] }, YFormat: func(v float64) string { return FormatNs(int64(v)) }}
	svg = cat.SVG()
	wellFormed(t, "categorical", svg)
	if !strings.Contains(svg, ">p99<") || !strings.Contains(svg, ">1.0ms<") {
		t.Errorf("categorical chart lacks its labels:\n%s", svg)
	}
	wellFormed(t, "empty", LineChart{}.SVG())
	wellFormed(t, "linear", LineChart{Series: []Series{{Name: "z", X: []float64{0, 1, 2}, Y: []float64{0, 0, 0}}}}.SVG())
}

func TestYTicks(t *testing.T) {
	if got := yTicks([]float64{1500, 9e6, 0}, true); len(got) != 5 || got[0] != 1000 || got[4] != 1e7 {
		t.Errorf("log ticks %v, want the decades from 1e3 to 1e7", got)
	}
	if got := yTicks([]float64{15, 90}, true); !slices.Equal(got, []float64{10, 20, 50, 100}) {
		t.Errorf("log ticks over one decade %v", got)
	}
	if got := yTicks([]float64{3, 100}, false); len(got) != 6 || got[1] != 20 || got[5] != 100 {
		t.Errorf("linear ticks %v", got)
	}
	if got := yTicks([]float64{0, 0}, false); len(got) < 2 || got[0] != 0 {
		t.Errorf("linear ticks of zeros %v", got)
	}
}

func sampleReport() *Report {
	run := func(target string, thr float64) TargetRun {
		lr := LoadResult{Throughput: thr, Requests: 1000, Allowed: 1000, Latency: Percentiles{P50: 1e5, P90: 2e5, P99: 5e5, P999: 1e6, Max: 2e6}}
		return TargetRun{Target: target, Rounds: []LoadResult{lr}, Median: lr}
	}
	mk := func(id string, conns int, runs ...TargetRun) CaseResult {
		var ts []string
		for _, r := range runs {
			ts = append(ts, r.Target)
		}
		return CaseResult{Case: Case{ID: id, Title: id, Conns: conns, Pipeline: 16, Targets: ts, Rounds: 1, Baseline: TargetRedisAnchor,
			Workload: Workload{Alg: AlgToken, Keys: 100000, Dist: DistUniform, Cost: 1}}, Runs: runs}
	}
	return &Report{
		Command: "sluice-bench", Started: time.Unix(1_700_000_000, 0), Finished: time.Unix(1_700_000_200, 0),
		Machine: Machine{NProc: 2, CPUModel: "Test CPU", LoadStart: 3},
		Options: defaultSuite(),
		Cases: []CaseResult{
			mk("goal-p16", 50, run(TargetSluiceMem, 900_000), run(TargetSluiceCluster, 100_000), run(TargetSluiceClusterLeader, 160_000), run(TargetRedisAnchor, 150_000)),
			mk("goal-p1", 50, run(TargetSluiceMem, 100_000), TargetRun{Target: TargetSluiceCluster, Unavailable: "exited | at start"}, run(TargetRedisAnchor, 80_000)),
			mk("conns-1", 1, run(TargetSluiceMem, 20_000), run(TargetRedisAnchor, 15_000)),
			mk("conns-4", 4, run(TargetSluiceMem, 60_000), run(TargetRedisAnchor, 40_000)),
		},
		Memory: []MemorySeries{
			{Target: TargetSluiceMem, Points: []MemoryPoint{{Keys: 1_000_000, RSS: 80 << 20, BaseRSS: 10 << 20, PerKey: 73.4, UsedMemory: -1, DBSize: 1_000_000}}},
			{Target: TargetRedis, Points: []MemoryPoint{{Keys: 1_000_000, RSS: 200 << 20, BaseRSS: 8 << 20, PerKey: 201.3, UsedMemory: 180_000_000, DBSize: 1_000_000}}},
		},
		Keys: []MemorySeries{
			{Target: TargetSluiceMem, Points: []MemoryPoint{{Keys: 1000, RSS: 11 << 20, Throughput: 800_000}, {Keys: 10_000_000, RSS: 800 << 20, PerKey: 80, Throughput: 700_000}},
				Scale: &ScaleResult{SmallKeys: 1000, LargeKeys: 10_000_000, Rounds: 3, Small: LoadResult{Throughput: 800_000}, Large: LoadResult{Throughput: 680_000}, Ratio: 0.85}},
			{Target: TargetRedis, Unavailable: "no redis"},
		},
		Engine: sampleEngineBench,
	}
}

// suiteCase is the default suite's case id.
func suiteCase(t *testing.T, id string) Case {
	for _, c := range defaultSuite().Cases() {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no case %s", id)
	return Case{}
}

func TestGoalsAndMarkdown(t *testing.T) {
	r := sampleReport()
	r.Cases[0].Case.Goals, r.Cases[1].Case.Goals = suiteCase(t, "goal-p16").Goals, suiteCase(t, "goal-p1").Goals
	goals := r.Goals()
	want := []string{GoalPass, GoalFallsShort, GoalPass, GoalFallsShort, GoalNotMeasured, GoalPass, GoalPass}
	if len(goals) != len(want) {
		t.Fatalf("%d goals, want %d", len(goals), len(want))
	}
	for i, g := range goals {
		if g.Status != want[i] {
			t.Errorf("goal %q: %s (%s), want %s", g.Goal.About, g.Status, g.Measured, want[i])
		}
	}
	if !strings.Contains(goals[2].Goal.About, "on the leader") || !strings.Contains(goals[2].Measured, "1.07x") {
		t.Errorf("cluster on its leader: %+v", goals[2])
	}
	if !strings.Contains(goals[4].Measured, "unavailable: exited | at start") {
		t.Errorf("unavailable cluster not reported: %q", goals[4].Measured)
	}
	charts := r.Charts()
	for _, name := range []string{"conns.svg", "latency-p16.svg", "latency-p1.svg", "memory.svg", "keys-throughput.svg"} {
		svg, ok := charts[name]
		if !ok {
			t.Errorf("chart %s missing", name)
			continue
		}
		wellFormed(t, name, svg)
	}
	md := r.Markdown("charts")
	for _, s := range []string{"| cores (nproc) | 2 |", "Test CPU", "Shared machine", "6.00x", "**pass**", "falls short",
		"![throughput against connections](charts/conns.svg)", "73 B", "unavailable: exited \\| at start", "## Accuracy",
		"| steady (evenly spaced requests) | 65875 | **31.1%** | 10243 | 10244 | 0% | 3.289% | 39.38% |",
		"| all | 191845 | **26.98%** | 25353 | 26408 | 1.017% | 11.6% | 33.56% |", "0.85x (680k/s with 10.00M keys"} {
		if !strings.Contains(md, s) {
			t.Errorf("report lacks %q", s)
		}
	}
}

// TestBenchfmt: a line per case, target and round in Go's benchmark
// format (name, iterations, then value-unit pairs), and the memory figures.
func TestBenchfmt(t *testing.T) {
	out := sampleReport().Benchfmt()
	line := regexp.MustCompile(`^Benchmark[^ ]+ \d+( [0-9.]+ [a-zA-Z0-9/-]+)+$`)
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, "Benchmark") {
			continue
		}
		n++
		if !line.MatchString(l) {
			t.Errorf("not a benchmark line: %q", l)
		}
	}
	for _, s := range []string{"BenchmarkSuite/goal-p16/sluice-mem 1000 1111.1 ns/op 100000 p50-ns 500000 p99-ns\n",
		"BenchmarkMemory/keys=1000000/sluice-mem 1 73.4 rss-B/key\n"} {
		if !strings.Contains(out, s) {
			t.Errorf("lacks %q:\n%s", s, out)
		}
	}
	if n < 10 {
		t.Errorf("%d lines:\n%s", n, out)
	}
}

func TestReportWrite(t *testing.T) {
	r := sampleReport()
	dir := t.TempDir()
	if err := r.Write(filepath.Join(dir, "results")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"results/report.md", "results/results.json", "results/bench.txt", "results/charts/conns.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	doc := filepath.Join(dir, "docs", "benchmarks.md")
	if err := r.WriteDoc(doc, "benchmarks"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(doc)
	if err != nil || !bytes.Contains(b, []byte("(benchmarks/conns.svg)")) {
		t.Errorf("doc: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "docs", "benchmarks", "memory.svg")); err != nil {
		t.Error(err)
	}

	// A rewrite replaces the whole page: nothing written by hand survives.
	if err := os.WriteFile(doc, []byte("# stale generated text\n\n## Rounds\n\nwritten by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteDoc(doc, "benchmarks"); err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	if want := r.Markdown("benchmarks"); string(b) != want {
		t.Errorf("rewritten doc:\n%s\nwant:\n%s", b, want)
	}
}

// TestStamp: the page names the run and the commit that made it.
func TestStamp(t *testing.T) {
	r := sampleReport()
	r.Machine.Sluice = "abc1234 (bin/sluice, built today)"
	head, _, _ := strings.Cut(r.Markdown("charts"), "\n## ")
	for _, s := range []string{"sluice abc1234", "`sluice-bench`", "2023-11-14 22:13 UTC", "Do not edit"} {
		if !strings.Contains(head, s) {
			t.Errorf("the stamp lacks %q:\n%s", s, head)
		}
	}
}

// TestProgress: a line per step, naming it and its result (a text, a
// failure, a run's figures); none without a writer.
func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	r := &Runner{Progress: &buf}
	r.note("one", "done one")
	r.note("two", errors.New("boom"))
	r.note("three", LoadResult{Throughput: 1500, Errors: 2, FirstError: "ERR x", Latency: Percentiles{P99: 2_000_000}})
	for _, want := range []string{"] one: done one\n", "] two: failed: boom\n", "] three: 2k/s p99 2.0ms (2 errors: ERR x)\n"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("progress %q lacks %q", buf.String(), want)
		}
	}
	quiet := &Runner{}
	quiet.note("x", "")
}

func TestSuitePlan(t *testing.T) {
	o := defaultSuite()
	if d := o.PlannedLength(); d > 3*time.Minute+50*time.Second { // make bench took 4m03s at a plan of 3m44s
		t.Errorf("the default suite is planned at %s, over budget", d)
	}
	ids := map[string]bool{}
	for _, c := range o.Cases() {
		if ids[c.ID] {
			t.Errorf("case %s twice", c.ID)
		}
		ids[c.ID] = true
		if err := c.Workload.Validate(); err != nil {
			t.Errorf("case %s: %v", c.ID, err)
		}
	}
	for _, id := range []string{"goal-p1", "goal-p16", "alg-log", "token-zipf", "token-hot", "token-deny50", "token-cost5", "conns-1", "conns-50"} {
		if !ids[id] {
			t.Errorf("the default suite lacks %s", id)
		}
	}
	if got := o.sweepCounts(); !slices.Equal(got, keyCounts(o.MaxKeys)) || !slices.Contains(got, o.MemoryKeys) {
		t.Errorf("the default suite's sweep counts %v: want the key counts, the memory point among them", got)
	}
	memOnly := SuiteOptions{Sections: map[string]bool{SectionMemory: true}, MemoryKeys: 5000}
	if got := memOnly.sweepCounts(); !slices.Equal(got, []uint64{5000}) {
		t.Errorf("-sections memory sweeps %v, want just the memory point", got)
	}
	if got := keyCounts(10_000_000); len(got) != 5 || got[0] != 1000 || got[4] != 10_000_000 {
		t.Errorf("key counts %v", got)
	}
	if got := keyCounts(1_500_000); got[len(got)-1] != 1_500_000 {
		t.Errorf("key counts %v", got)
	}
}

// sampleEngineBench is `go test -bench SlidingAccuracy ./engine/`'s output
// (its "all" line without the GOMAXPROCS suffix, as with GOMAXPROCS=1).
//
//go:embed testdata/engine-bench.txt
var sampleEngineBench string

// TestAccuracyFromEngineBench: the page's accuracy rows are engine's
// BenchmarkSlidingAccuracy lines, the first of each pattern, with or
// without the GOMAXPROCS suffix; without them the section is left out.
func TestAccuracyFromEngineBench(t *testing.T) {
	r := &Report{Engine: sampleEngineBench + "BenchmarkSlidingAccuracy/steady-2 1 5 ns/op 7 requests\nBenchmarkSlidingAccuracyX/steady 1 5 ns/op\n"}
	rows := r.Accuracy()
	var names []string
	for _, row := range rows {
		names = append(names, row.Name)
	}
	if strings.Join(names, ",") != "steady,edges,random,all" {
		t.Fatalf("rows %v", names)
	}
	if f := rows[0].Figures; f["requests"] != 65875 || f["differ-%"] != 31.1 || f["false-allows"] != 10243 || f["under-differ-%"] != 0 || f["ns/op"] != 32353484 {
		t.Errorf("steady figures %v", f)
	}
	if f := rows[3].Figures; f["requests"] != 191845 || f["over-differ-%"] != 33.56 {
		t.Errorf("all figures %v", f)
	}
	r.Engine = "BenchmarkEngineToken-2 1000 100 ns/op\n"
	if md := r.Markdown("charts"); len(r.Accuracy()) != 0 || strings.Contains(md, "## Accuracy") {
		t.Error("an accuracy section without BenchmarkSlidingAccuracy lines")
	}
}

// TestSharedMachineBanner: the load average before the run decides the
// banner.
func TestSharedMachineBanner(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Machine
		want bool
	}{
		{"loaded", Machine{LoadStart: 3}, true},
		{"quiet", Machine{LoadStart: 0.5}, false},
	} {
		r := &Report{Machine: tc.m}
		if got := strings.Contains(r.Markdown("charts"), "Shared machine"); got != tc.want {
			t.Errorf("%s: banner %v, want %v", tc.name, got, tc.want)
		}
	}
}

// defaultSuite is the suite `make bench` runs: the options' defaults.
func defaultSuite() SuiteOptions {
	o := SuiteOptions{}
	o.Defaults()
	return o
}

// TestVersion: the version a server binary prints, redis-server's and
// sluice's way; a missing binary says so.
func TestVersion(t *testing.T) {
	dir := t.TempDir()
	for name, out := range map[string]string{"redis": "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64", "sluice": "sluice v0.2.0-221-g5e55b50\ncommit 5e55b50"} {
		bin := filepath.Join(dir, name)
		if err := os.WriteFile(bin, []byte("#!/bin/sh\necho '"+out+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if got, want := version(bin), map[string]string{"redis": "7.0.15", "sluice": "v0.2.0-221-g5e55b50"}[name]; got != want {
			t.Errorf("%s: version %q, want %q", name, got, want)
		}
	}
	if got := version(filepath.Join(dir, "missing")); !strings.HasPrefix(got, "unavailable") {
		t.Errorf("a missing binary's version %q", got)
	}
}
