package persistence

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/fuzz/FuzzDecodeSnapshot")

// TestSeedCorpus writes FuzzDecodeSnapshot's seed corpus when run with
// -update-corpus; `go test` then runs every seed as part of the fuzz target.
func TestSeedCorpus(t *testing.T) {
	if !*updateCorpus {
		t.Skip("run with -update-corpus to regenerate testdata/fuzz")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeSnapshot")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	recs := sampleRecords()[:6]
	full := encode(t, sampleHeader(), recs)
	seeds := map[string][]byte{
		"empty-snapshot": encode(t, Header{}, nil),
		"every-kind":     full,
		"one-log":        encode(t, Header{Clock: engine.ClockState{Last: now}}, recs[4:5]),
		"truncated":      full[:len(full)/2],
		"magic-only":     []byte(Magic),
		"future-version": append([]byte(Magic), 2),
	}
	for name, data := range seeds {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
