// Package sluicetest runs an in-memory sluice server for tests of code that
// talks to sluice over the network (the middlewares, clients).
package sluicetest

import (
	"testing"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/servetest"
	"github.com/sluice-rl/sluice/resp"
)

// Start runs a single in-memory node, with client tracking and DEBUG
// enabled, on 127.0.0.1 and returns its address; it stops when the test
// ends.
func Start(t testing.TB) string {
	t.Helper()
	tr := resp.NewTracker(0)
	eng := engine.New(engine.Config{Watcher: tr})
	srv := resp.NewServer(resp.Config{EnableDebug: true, Engine: eng, Tracker: tr}, resp.NewLocalExecutor(eng, nil))
	return servetest.Start(t, srv)
}
