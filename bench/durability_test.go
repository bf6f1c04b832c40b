package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
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
		if _, err := ParseTarget(n); err != nil {
			t.Errorf("ParseTarget(%s): %v", n, err)
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
// on every durability target beside Redis+Lua; the full suite has them.
func TestDurabilitySection(t *testing.T) {
	for _, c := range DefaultSuiteOptions().Cases() {
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
	for _, c := range FullSuiteOptions().Cases() {
		if strings.HasPrefix(c.ID, "durability-") {
			full++
		}
	}
	if full != 2 {
		t.Errorf("the full suite has %d durability cases, want 2", full)
	}
}

// TestParseCommitted reads the two counters from a node's metrics page.
func TestParseCommitted(t *testing.T) {
	page := "# HELP sluice_raft_committed_entries_total Log entries...\n# TYPE sluice_raft_committed_entries_total counter\n" +
		"sluice_raft_committed_entries_total 1234\nsluice_raft_committed_ops_total 30850\nsluice_raft_term 3\n"
	e, o, err := parseCommitted(bufio.NewScanner(strings.NewReader(page)))
	if err != nil || e != 1234 || o != 30850 {
		t.Fatalf("parseCommitted = %v, %v, %v", e, o, err)
	}
	for _, bad := range []string{"", "sluice_raft_committed_entries_total 1\n", "sluice_raft_committed_entries_total x\nsluice_raft_committed_ops_total 2\n"} {
		if _, _, err := parseCommitted(bufio.NewScanner(strings.NewReader(bad))); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestLogCountersSumNodes: the counters are summed over the nodes (the
// leader may change), and a load run reports ops per entry from their
// difference over the measured phase.
func TestLogCountersSumNodes(t *testing.T) {
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
	e, o, err := logCounters(ctx, addrs)
	if err != nil || e != 15 || o != 160 {
		t.Fatalf("logCounters = %v, %v, %v; want 15, 160", e, o, err)
	}
	if _, _, err := logCounters(ctx, append(addrs, "127.0.0.1:1")); err == nil {
		t.Error("an unreachable node's metrics gave no error")
	}
}

// TestDurabilityMarkdown: the section's table shows the ops per log entry
// and server CPU of each target.
func TestDurabilityMarkdown(t *testing.T) {
	c := Case{ID: "durability-p1", Title: "Log stores", Workload: Workload{Alg: AlgToken, Keys: 10, Dist: DistUniform, Cost: 1},
		Conns: 50, Pipeline: 1, Targets: []string{"sluice-cluster-leader-wal-everysec", TargetRedisAnchor}, Rounds: 1, Baseline: TargetRedisAnchor}
	cr := CaseResult{Case: c, Runs: []TargetRun{
		{Target: "sluice-cluster-leader-wal-everysec", Rounds: []LoadResult{{}}, Median: LoadResult{Throughput: 30000, ServerCPU: 25500, OpsPerEntry: 24.6}},
		{Target: TargetRedisAnchor, Rounds: []LoadResult{{}}, Median: LoadResult{Throughput: 60000, ServerCPU: 14800}},
	}}
	md := (&Report{Cases: []CaseResult{cr}}).Markdown("charts")
	for _, want := range []string{
		"## Log stores and durability modes",
		"| sluice-cluster-leader-wal-everysec | 30k/s | 0.50x |",
		"| 25.5 µs | 24.6 | 0 |",
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
