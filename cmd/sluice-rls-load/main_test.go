package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/rls"
	"github.com/sluice-rl/sluice/rls/server"
)

type memExec struct{ e *engine.Engine }

func (m memExec) Execute(_ context.Context, ops []engine.Op, results []engine.Result) error {
	m.e.Apply(time.Now().UnixNano(), ops, results)
	return nil
}

// TestLoad runs the generator briefly against sluice's gRPC front end in
// process: three descriptors per request, a limit of 5 per value on d2, so
// some requests are over the limit; its own process's CPU is measured.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	rules := "domain: bench\ndescriptors:\n  - key: d0\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n  - key: d1\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n  - key: d2\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	svc, err := rls.New(rls.Config{Dir: dir, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	g, err := server.ListenGRPC("127.0.0.1:0", server.Config{Service: svc, Exec: memExec{engine.New(engine.Config{Stripes: 4})}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	for _, codec := range []string{"raw", "proto"} {
		var out bytes.Buffer
		err = run([]string{"-addr", g.Addr(), "-callers", "4", "-descriptors", "3", "-values", "10", "-duration", "300ms", "-warmup", "50ms",
			"-pids", strconv.Itoa(os.Getpid()), "-label", "t", "-codec", codec, "-cpuprofile", filepath.Join(dir, "cpu.pprof")}, &out, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var r result
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		if r.Requests < 10 || r.Errors != 0 || r.OverLimit == 0 || r.PerSecond <= 0 || r.P99Micros < r.P50Micros || r.CPUMicros <= 0 || r.LoadCPUMicros <= 0 || r.Label != "t" {
			t.Fatalf("-codec %s: result %+v", codec, r)
		}
		if fi, err := os.Stat(filepath.Join(dir, "cpu.pprof")); err != nil || fi.Size() == 0 {
			t.Fatalf("-cpuprofile wrote no profile: %v", err)
		}
	}
	var out bytes.Buffer
	if err := run([]string{"-addr", g.Addr(), "-callers", "2", "-duration", "100ms", "-warmup", "10ms", "-label", "sluice round=1", "-format", "bench"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^BenchmarkRLS/sluice/round-1/callers=2/descriptors=1 [1-9][0-9]* [0-9.]+ ns/op [0-9]+ p50-us [0-9]+ p99-us [0-9.]+ server-cpu-us/op\n$`).MatchString(out.String()) {
		t.Fatalf("-format bench: %q", out.String())
	}
}
