package bench

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDurabilityTargets: six targets, one per log store and fsync mode,
// each parsed back to its flags and accepted as a target name; other names
// are not durability targets.
func TestDurabilityTargets(t *testing.T) {
	names := DurabilityTargets()
	if len(names) != 6 {
		t.Fatalf("%d durability targets, want 6: %v", len(names), names)
	}
	seen := map[string]bool{}
	for _, n := range names {
		store, fsync, ok := durabilityOf(n)
		if !ok || n != fmt.Sprintf("sluice-cluster-leader-%s-%s", store, fsync) {
			t.Errorf("%s: parsed as %q %q %v", n, store, fsync, ok)
		}
		seen[store+"/"+fsync] = true
		if !slices.Contains(TargetNames(), n) {
			t.Errorf("%s is not a target name", n)
		}
	}
	for _, want := range []string{"bolt/always", "bolt/everysec", "bolt/no", "wal/always", "wal/everysec", "wal/no"} {
		if !seen[want] {
			t.Errorf("no target for %s", want)
		}
	}
	for _, n := range []string{TargetSluiceClusterLeader, "sluice-cluster-leader-wal", "sluice-cluster-leader-lsm-always", "sluice-cluster-leader-wal-sometimes", "sluice-cluster-wal-always"} {
		if _, _, ok := durabilityOf(n); ok {
			t.Errorf("%s parsed as a durability target", n)
		}
	}
}

// TestDurabilitySection: the durability rows are left out of the default
// suite (its time budget) and run alone with the section, at P1 and P16,
// on every durability target beside Redis+Lua; -sections all has them.
func TestDurabilitySection(t *testing.T) {
	for _, c := range defaultSuite().Cases() {
		if strings.HasPrefix(c.ID, "durability-") {
			t.Errorf("the default suite runs %s", c.ID)
		}
	}
	o := SuiteOptions{Sections: map[string]bool{SectionDurability: true}}
	cs := o.Cases()
	if len(cs) != 2 || cs[0].ID != "durability-p1" || cs[1].ID != "durability-p16" {
		t.Fatalf("the durability section's cases: %+v", cs)
	}
	for i, c := range cs {
		if c.Load.Pipeline != []int{1, 16}[i] || c.Load.Conns != 50 || c.Baseline != TargetRedisAnchor ||
			strings.Join(c.Targets, ",") != strings.Join(append(DurabilityTargets(), TargetRedisAnchor), ",") {
			t.Errorf("case %s: %+v", c.ID, c)
		}
	}
	full := 0
	all := SuiteOptions{Sections: map[string]bool{}}
	for _, s := range Sections() {
		all.Sections[s] = true
	}
	for _, c := range all.Cases() {
		if strings.HasPrefix(c.ID, "durability-") {
			full++
		}
	}
	if full != 2 {
		t.Errorf("-sections all has %d durability cases, want 2", full)
	}
}

// TestParseMetrics reads the group commit counters from a node's metrics
// page: the committed counters are required, the histograms optional, and
// several groups' series add up.
func TestParseMetrics(t *testing.T) {
	const counters = "# TYPE sluice_raft_committed_entries_total counter\n# TYPE sluice_raft_committed_ops_total counter\n"
	const hists = "# TYPE sluice_raft_commit_duration_seconds histogram\n# TYPE sluice_batch_hold_duration_seconds histogram\n"
	type want struct{ entries, ops, commitSum, commitCount, holdSum, holdCount float64 }
	tests := []struct {
		name string
		page string
		want want
	}{
		{"counters only", "# HELP sluice_raft_committed_entries_total Log entries...\n" + counters +
			"sluice_raft_committed_entries_total 1234\nsluice_raft_committed_ops_total 30850\nsluice_raft_term 3\n",
			want{entries: 1234, ops: 30850}},
		{"histograms", counters + hists + "sluice_raft_committed_entries_total 10\nsluice_raft_committed_ops_total 460\n" +
			"sluice_raft_commit_duration_seconds_bucket{le=\"0.001\"} 9\nsluice_raft_commit_duration_seconds_bucket{le=\"+Inf\"} 10\n" +
			"sluice_raft_commit_duration_seconds_sum 0.0078\nsluice_raft_commit_duration_seconds_count 10\n" +
			"sluice_batch_hold_duration_seconds_bucket{le=\"+Inf\"} 11\nsluice_batch_hold_duration_seconds_sum 0.0084\nsluice_batch_hold_duration_seconds_count 11\n",
			want{10, 460, 0.0078, 10, 0.0084, 11}},
		{"groups", counters + hists + "sluice_raft_committed_entries_total{group=\"0\"} 3\nsluice_raft_committed_entries_total{group=\"1\"} 4\n" +
			"sluice_raft_committed_ops_total{group=\"0\"} 30\nsluice_raft_committed_ops_total{group=\"1\"} 40\n" +
			"sluice_raft_commit_duration_seconds_bucket{group=\"0\",le=\"+Inf\"} 3\nsluice_raft_commit_duration_seconds_count{group=\"0\"} 3\n" +
			"sluice_raft_commit_duration_seconds_bucket{group=\"1\",le=\"+Inf\"} 4\nsluice_raft_commit_duration_seconds_count{group=\"1\"} 4\n",
			want{entries: 7, ops: 70, commitCount: 7}},
	}
	for _, tt := range tests {
		m := map[string]float64{}
		err := parseMetrics(strings.NewReader(tt.page), m)
		got := want{m[entries], m[ops], m[commits+"_sum"], m[commits+"_count"], m[holds+"_sum"], m[holds+"_count"]}
		if err != nil || got != tt.want {
			t.Errorf("%s: parseMetrics = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "sluice_raft_committed_entries_total 1\n", "sluice_raft_committed_entries_total x\nsluice_raft_committed_ops_total 2\n",
		"sluice_raft_committed_entries_total 1\nsluice_raft_committed_ops_total 2\nsluice_raft_commit_duration_seconds_sum y\n"} {
		if err := parseMetrics(strings.NewReader(bad), map[string]float64{}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestLoadResultFigures: CPU per request and per-entry figures from two
// readings' difference, blank where a counter did not move.
func TestLoadResultFigures(t *testing.T) {
	d := map[string]float64{entries: 200, ops: 9000, commits + "_sum": 0.16, commits + "_count": 200, holds + "_sum": 0.16, holds + "_count": 200, serverCPU: 0.5}
	res := LoadResult{Requests: 10_000}
	res.setFigures(d)
	if res.OpsPerEntry != 45 || math.Abs(res.CommitTime-800e3) > 1 || math.Abs(res.HoldTime-800e3) > 1 || math.Abs(res.ServerCPU-50e3) > 1e-6 {
		t.Errorf("ops per entry %v, commit %v ns, hold %v ns, server CPU %v ns; want 45, 800000, 800000, 50000", res.OpsPerEntry, res.CommitTime, res.HoldTime, res.ServerCPU)
	}
	none := LoadResult{Requests: 10_000}
	none.setFigures(map[string]float64{entries: 0, ops: 0, commits + "_sum": 0, commits + "_count": 0})
	if none.OpsPerEntry != 0 || none.CommitTime != 0 || none.HoldTime != 0 || none.ServerCPU != 0 {
		t.Errorf("no entries: %+v", none)
	}
}

// TestReadMetricsSumsNodes: the counters are summed over the nodes (the
// leader may change), and an unreachable node's metrics are an error.
func TestReadMetricsSumsNodes(t *testing.T) {
	var addrs []string
	for _, v := range [][2]int{{10, 100}, {5, 60}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "sluice_raft_committed_entries_total %d\nsluice_raft_committed_ops_total %d\n", v[0], v[1])
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		addrs = append(addrs, ln.Addr().String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := readMetrics(ctx, addrs)
	if err != nil || m[entries] != 15 || m[ops] != 160 {
		t.Fatalf("readMetrics = %v, %v; want 15 entries, 160 ops", m, err)
	}
	if _, err := readMetrics(ctx, append(addrs, "127.0.0.1:1")); err == nil {
		t.Error("an unreachable node's metrics gave no error")
	}
}

// TestDurabilityMarkdown: the section's table shows the ops per log entry
// and server CPU of each target.
func TestDurabilityMarkdown(t *testing.T) {
	c := Case{ID: "durability-p1", Title: "Log stores", Workload: Workload{Alg: AlgToken, Keys: 10, Dist: DistUniform, Cost: 1},
		Conns: 50, Pipeline: 1, Targets: []string{"sluice-cluster-leader-wal-everysec", TargetRedisAnchor}, Rounds: 1, Baseline: TargetRedisAnchor}
	cr := CaseResult{Case: c, Runs: []TargetRun{
		{Target: "sluice-cluster-leader-wal-everysec", Rounds: []LoadResult{{}}, Median: LoadResult{Throughput: 30000, ServerCPU: 25500, OpsPerEntry: 24.6, CommitTime: 777e3, HoldTime: 843e3}},
		{Target: TargetRedisAnchor, Rounds: []LoadResult{{}}, Median: LoadResult{Throughput: 60000, ServerCPU: 14800}},
	}}
	md := (&Report{Cases: []CaseResult{cr}}).Markdown("charts")
	for _, want := range []string{
		"## Log stores and durability modes",
		"| sluice-cluster-leader-wal-everysec | 30k/s | 0.50x |",
		"| 25.5 µs | 0% | 24.6 | 777µs | 843µs | 0 |",
		"sluice-bench -sections durability",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
	if n := strings.Count(md, "`durability-p1`"); n != 1 {
		t.Errorf("the durability case is rendered %d times, want once (not in the main tables)", n)
	}
}
