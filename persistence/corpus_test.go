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
	// The seeds without a suffix were written by version 1 of the format
	// and are kept as they are: TestVersion1Snapshots reads every-kind.
	recs := sampleRecords()
	full := encode(t, sampleHeader(), recs[:6])
	// The -v2 seeds were written by version 2 and are kept as they are.
	_ = full
	seeds := map[string][]byte{
		"every-kind-v3":     encode(t, sampleHeader(), append(recs[:6:6], recs[8], recs[9], recs[10])),
		"strings-v3":        encode(t, Header{Clock: engine.ClockState{Last: now}}, recs[9:11]),
		"future-version-v4": append([]byte(Magic), 4),
	}
	for name, data := range seeds {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
