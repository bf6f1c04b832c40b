package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// sluiceBin is the sluice binary named by $SLUICE_BIN, an absolute path:
// make test builds bin/sluice first and sets it. A plain go test skips the
// tests that need a real sluice rather than run a stale binary.
func sluiceBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("SLUICE_BIN")
	if bin == "" {
		t.Skip("set SLUICE_BIN to a sluice binary to run this test")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("SLUICE_BIN: %v", err)
	}
	return bin
}

func quietRunner(cfg ServerConfig) *Runner {
	return &Runner{Env: NewEnv(cfg)}
}

func TestUnavailableTargetIsReported(t *testing.T) {
	r := quietRunner(ServerConfig{SluiceBin: filepath.Join(t.TempDir(), "missing"), RedisBin: filepath.Join(t.TempDir(), "missing")})
	defer r.Env.Close()
	c := Case{ID: "x", Workload: Workload{Alg: AlgToken, Keys: 10, Dist: DistUniform, Cost: 1},
		Load:    LoadOptions{Conns: 1, Pipeline: 1, Requests: 10},
		Targets: []string{TargetSluiceMem, TargetRedisAnchor}, Rounds: 2, Baseline: TargetRedisAnchor}
	cr, err := r.RunCase(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range cr.Runs {
		if run.Unavailable == "" || run.OK() {
			t.Errorf("%s: not reported unavailable: %+v", run.Target, run)
		}
	}
	if cr.Ratio(TargetSluiceMem) != 0 {
		t.Error("a ratio between unavailable targets")
	}
	s, err := r.Sweep(context.Background(), SweepOptions{Targets: []string{TargetSluiceMem}, Counts: []uint64{10}})
	if err != nil || len(s) != 1 || s[0].Unavailable == "" {
		t.Errorf("sweep without binaries: %+v %v", s, err)
	}
}

// TestAgainstSluice runs a short case and a small memory sweep against a
// real sluice.
func TestAgainstSluice(t *testing.T) {
	bin := sluiceBin(t)
	r := quietRunner(ServerConfig{SluiceBin: bin, RedisBin: "redis-server", WorkDir: t.TempDir()})
	defer r.Env.Close()
	ctx := testCtx(t)

	c := Case{ID: "t", Workload: Workload{Alg: AlgLog, Keys: 20, Dist: DistZipf, Cost: 3, DenyShare: 0.5},
		Load:    LoadOptions{Conns: 2, Pipeline: 4, Requests: 400},
		Targets: []string{TargetSluiceMem, TargetSluiceDurable}, Rounds: 1}
	cr, err := r.RunCase(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range cr.Runs {
		if !run.OK() || run.Median.Errors != 0 || run.Median.Requests != 400 {
			t.Fatalf("%s: %+v", run.Target, run)
		}
		if d := run.Median.DenyShare(); d < 0.35 || d > 0.65 {
			t.Errorf("%s: denied share %.2f, want about 0.5", run.Target, d)
		}
	}

	s, err := r.Sweep(ctx, SweepOptions{Targets: []string{TargetSluiceMem}, Counts: []uint64{100, 1000}})
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 1 || len(s[0].Points) != 2 || s[0].Points[1].DBSize != 1000 || s[0].Points[1].RSS <= 0 {
		t.Errorf("sweep: %+v", s)
	}
}

// TestDurabilityTargetAgainstSluice: a durability target starts the
// cluster with its log store and mode, and a run on it reports the three
// nodes' CPU and the ops per log entry.
func TestDurabilityTargetAgainstSluice(t *testing.T) {
	bin := sluiceBin(t)
	r := quietRunner(ServerConfig{SluiceBin: bin, RedisBin: "redis-server", WorkDir: t.TempDir()})
	defer r.Env.Close()
	ctx := testCtx(t)
	name := "sluice-cluster-leader-wal-everysec"
	c := Case{ID: "d", Workload: Workload{Alg: AlgToken, Keys: 50, Dist: DistUniform, Cost: 1},
		Load:    LoadOptions{Conns: 8, Pipeline: 4, Requests: 2000},
		Targets: []string{name}, Rounds: 1}
	cr, err := r.RunCase(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	run := cr.Run(name)
	if run == nil || !run.OK() || run.Median.Errors != 0 {
		t.Fatalf("%s: %+v", name, run)
	}
	if m := run.Median; m.OpsPerEntry < 1 || m.ServerCPU <= 0 || m.CommitTime <= 0 || m.HoldTime <= 0 {
		t.Errorf("ops per entry %.1f, server CPU %.0f ns, commit %.0f ns, hold %.0f ns: want all measured",
			m.OpsPerEntry, m.ServerCPU, m.CommitTime, m.HoldTime)
	}
	tg, err := r.Env.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(tg.PIDs()) != 3 || len(tg.Addrs) != 1 {
		t.Errorf("the target has %d processes and addresses %v, want 3 and the leader's", len(tg.PIDs()), tg.Addrs)
	}
	v, err := tg.Do(ctx, "CONFIG", "GET", "appendfsync")
	if err != nil || len(v.Elems) != 2 || v.Elems[1].Str != "everysec" {
		t.Errorf("CONFIG GET appendfsync on the target: %+v %v", v, err)
	}
}
