package cluster

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// The log stores' own tests are in cluster/logstore; these start nodes on
// them.

// TestLogStoreMismatchRefused: a node restarted on its data dir with the
// other log store refuses to start, naming both stores, and the data dir
// still serves its own store afterwards.
func TestLogStoreMismatchRefused(t *testing.T) {
	for _, tc := range []struct{ first, second string }{
		{LogStoreBolt, LogStoreWAL},
		{LogStoreWAL, LogStoreBolt},
	} {
		t.Run(tc.first+"-then-"+tc.second, func(t *testing.T) {
			dir := t.TempDir()
			tcl := newTestCluster(t, 1, func(_ int, c *Config) {
				diskSetup{tc.first, FsyncAlways}.apply(c, dir)
			})
			exec(t, tcl.nodes[0], decide("m", tokenRule, 5)) // the whole bucket
			tcl.stop(0)

			cfg := tcl.cfgs[0]
			cfg.LogStore = tc.second
			h, err := NewHost(context.Background(), cfg, []*engine.Engine{engine.New(engine.Config{Stripes: 16})})
			if err == nil {
				h.Close(context.Background())
				t.Fatalf("started with %s on a %s data dir", tc.second, tc.first)
			}
			if msg := err.Error(); !strings.Contains(msg, `"`+tc.first+`"`) || !strings.Contains(msg, `"`+tc.second+`"`) {
				t.Fatalf("the error does not name both stores: %v", err)
			}

			tcl.start(0)
			tcl.waitReady()
			if got := allowed(exec(t, tcl.nodes[0], decide("m", tokenRule, 1))); got != "0" {
				t.Fatalf("after the refused start: %s, want 0 (the decision was kept)", got)
			}
		})
	}
}

// TestResolveLogStore: a node that asks for no log store gets the one its
// data dir holds, whatever the default, and a new data dir gets the
// default (wal); New starts on it and keeps its decisions either way.
func TestResolveLogStore(t *testing.T) {
	if got, err := ResolveLogStore(filepath.Join(t.TempDir(), "new")); err != nil || got != LogStoreWAL {
		t.Fatalf("a new data dir: %q, %v; want %q", got, err, LogStoreWAL)
	}
	for _, made := range []string{LogStoreBolt, LogStoreWAL} {
		t.Run(made, func(t *testing.T) {
			dir := t.TempDir()
			tcl := newTestCluster(t, 1, func(_ int, c *Config) {
				diskSetup{made, FsyncAlways}.apply(c, dir)
			})
			exec(t, tcl.nodes[0], decide("m", tokenRule, 5)) // the whole bucket
			tcl.stop(0)
			if got, err := ResolveLogStore(tcl.cfgs[0].DataDir); err != nil || got != made {
				t.Fatalf("ResolveLogStore = %q, %v; want %q", got, err, made)
			}
			tcl.cfgs[0].LogStore = "" // the default settings
			tcl.start(0)
			tcl.waitReady()
			if got := allowed(exec(t, tcl.nodes[0], decide("m", tokenRule, 1))); got != "0" {
				t.Fatalf("restarted with no store named: %s, want 0 (the decision was kept)", got)
			}
		})
	}
}
