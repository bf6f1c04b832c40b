package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/bench"
)

func TestFlagsNameTheBadOnes(t *testing.T) {
	var stderr bytes.Buffer
	_, err := parseFlags([]string{"-workload", "gcra", "-dist", "pareto", "-target", "memcached", "-deny", "2", "-cost", "0", "-sections", "nope"}, &stderr)
	if err == nil {
		t.Fatal("bad flags accepted")
	}
	for _, s := range []string{"-workload", "-dist", "-target", "-deny", "-cost", "-sections"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
}

func TestSingleCaseDefaults(t *testing.T) {
	o, err := parseFlags([]string{"-workload", "sliding"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c := o.single; c == nil || strings.Join(c.Targets, ",") != "sluice-mem,redis" || c.Load.Conns != 50 || c.Load.Pipeline != 16 ||
		c.Load.Duration != 3*time.Second || c.Load.Warmup != 500*time.Millisecond || c.Rounds != 3 || c.Baseline != "redis" {
		t.Errorf("single-case defaults: %+v", o.single)
	}
	o, err = parseFlags([]string{"-target", "redis-anchor"}, &bytes.Buffer{})
	if err != nil || o.single == nil || o.single.Workload.Alg != "token" {
		t.Errorf("-target alone: %+v %v", o, err)
	}
	o, err = parseFlags(nil, &bytes.Buffer{})
	if err != nil || o.single != nil {
		t.Errorf("no flags is the suite: %+v %v", o, err)
	}
}

func TestRenderSavedResults(t *testing.T) {
	dir := t.TempDir()
	rep := &bench.Report{Command: "sluice-bench", Started: time.Unix(1_700_000_000, 0), Finished: time.Unix(1_700_000_100, 0),
		Machine: bench.Machine{NProc: 2, CPUModel: "Test CPU"}, Options: defaultSuite(),
		Cases: []bench.CaseResult{{Case: bench.Case{ID: "goal-p16", Baseline: bench.TargetRedisAnchor,
			Goals: []bench.Goal{{Target: bench.TargetSluiceMem, About: "x", Min: 3}}}}}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	saved := filepath.Join(dir, "results.json")
	if err := os.WriteFile(saved, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	doc := filepath.Join(dir, "docs", "benchmarks.md")
	code := run([]string{"-render", saved, "-out", filepath.Join(dir, "out"), "-doc", doc}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	md, err := os.ReadFile(doc)
	if err != nil || !bytes.Contains(md, []byte("Test CPU")) || !bytes.Contains(md, []byte("## Goals")) {
		t.Errorf("doc: %v\n%s", err, md)
	}
	for _, f := range []string{"report.md", "bench.txt", "results.json"} {
		if _, err := os.Stat(filepath.Join(dir, "out", f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.HasPrefix(stdout.String(), "goos: ") {
		t.Errorf("stdout is not benchmark lines: %.200q", stdout.String())
	}
	if code := run([]string{"-render", filepath.Join(dir, "missing.json")}, &stdout, &stderr); code == 0 {
		t.Error("rendering a missing file succeeded")
	}
}

// TestSectionsFlag: -sections durability runs only the log store rows;
// -sections all every section, durability included; and a durability
// target is a valid -target.
func TestSectionsFlag(t *testing.T) {
	o, err := parseFlags([]string{"-sections", "durability"}, &bytes.Buffer{})
	if err != nil || len(o.suite.Sections) != 1 || !o.suite.Sections["durability"] {
		t.Errorf("-sections durability: %+v %v", o.suite.Sections, err)
	}
	o, err = parseFlags([]string{"-sections", "all"}, &bytes.Buffer{})
	if err != nil || !o.suite.Sections["durability"] || !o.suite.Sections["goals"] {
		t.Errorf("-sections all: %v %v", o.suite.Sections, err)
	}
	o, err = parseFlags([]string{"-target", "sluice-cluster-leader-wal-everysec,redis-anchor", "-pipeline", "1"}, &bytes.Buffer{})
	if err != nil || o.single == nil {
		t.Errorf("a durability target: %+v %v", o, err)
	}
}

// defaultSuite is the suite `make bench` runs: the options' defaults.
func defaultSuite() bench.SuiteOptions {
	o := bench.SuiteOptions{}
	o.Defaults()
	return o
}

// TestRenderAccuracyFromEngineBench: a results.json saved before the
// accuracy figures moved to the engine (with an "accuracy" field) still
// renders, and the page's accuracy section comes from -engine-bench's
// BenchmarkSlidingAccuracy lines.
func TestRenderAccuracyFromEngineBench(t *testing.T) {
	dir := t.TempDir()
	saved, engineBench := filepath.Join(dir, "results.json"), filepath.Join(dir, "engine-bench.txt")
	old := `{"command":"sluice-bench","accuracy":{"options":{"Keys":40},"patterns":[{"name":"steady","requests":100}],"total":{"name":"all"}}}`
	if err := os.WriteFile(saved, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	line := "BenchmarkSlidingAccuracy/steady-2 \t 38 \t 32353484 ns/op \t 31.10 differ-% \t 65875 requests\n"
	if err := os.WriteFile(engineBench, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-render", saved, "-out", filepath.Join(dir, "out"), "-engine-bench", engineBench}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	md, err := os.ReadFile(filepath.Join(dir, "out", "report.md"))
	if err != nil || !bytes.Contains(md, []byte("## Accuracy of the sliding window counter")) || !bytes.Contains(md, []byte("| steady (evenly spaced requests) | 65875 | **31.1%** |")) {
		t.Errorf("report: %v\n%s", err, md)
	}
}
