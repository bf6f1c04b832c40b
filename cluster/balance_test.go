package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingHandler counts the log records whose message starts with
// prefix, then passes them on.
type countingHandler struct {
	slog.Handler
	prefix string
	n      *atomic.Int64
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(as), h.prefix, h.n}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{h.Handler.WithGroup(name), h.prefix, h.n}
}

// TestHostBalancerRetriesAMemberThatReturns: while the preferred leader of
// group 1 is down, the balancer's transfers to it fail and it is left
// alone longer each time (5 s, then 10 s). Once it is back and answers
// heartbeats, the balancer tries it again at its next round, not when
// that wait runs out, and the group goes back to it.
func TestHostBalancerRetriesAMemberThatReturns(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for two failed transfers, 6 s")
	}
	const shards = 3
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var failed, attempts atomic.Int64 // failed transfers; transfers tried
	th := newTestHosts(t, 3, shards, func(i int, c *Config) {
		c.InMemory = false
		c.DataDir = dirs[i]
		c.LogStore = "wal"
		c.Fsync = "no"
		h := countingHandler{c.Logger.Handler(), "balance: leadership transfer failed", &failed}
		c.Logger = slog.New(countingHandler{h, "balance: ", &attempts})
	})
	th.waitBalanced(20 * time.Second)
	th.stop(1) // group 1's preferred leader
	// The survivor that took group 1 over fails to hand it back twice:
	// the member is now left alone for 2*balanceBackoffMin.
	waitFor(t, 4*balanceBackoffMin, func() error {
		if n := failed.Load(); n < 2 {
			return fmt.Errorf("%d failed transfers to the stopped member", n)
		}
		return nil
	})
	tried := attempts.Load()
	th.start(1)
	start := time.Now()
	// Its heartbeats resume within a heartbeat timeout, and the next
	// round (a second at most) tries it: well before the 10 s wait ends.
	waitFor(t, 4*balanceEvery, func() error {
		if attempts.Load() == tried {
			return errors.New("no transfer tried since the member returned")
		}
		return nil
	})
	t.Logf("transfer tried %s after the member returned", time.Since(start).Round(time.Millisecond))
	// The transfer may fail while the member catches up (Raft's own
	// replication backs off from a member that was down); the group goes
	// back to it in the end.
	th.waitBalanced(30 * time.Second)
	t.Logf("group 1 back on its preferred member %s after its return", time.Since(start).Round(time.Millisecond))
}

// TestBalancerForgetsRemovedMembers: the balancer's memory of failed
// transfers keeps the members some group has, and drops the others.
func TestBalancerForgetsRemovedMembers(t *testing.T) {
	th := newTestHosts(t, 1, 2, nil)
	failed := map[string]balanceWait{"n1": {next: time.Second}, "gone": {next: time.Second}}
	th.hosts[0].forgetRemoved(failed)
	if _, ok := failed["gone"]; ok || len(failed) != 1 {
		t.Fatalf("after forgetRemoved: %v, want only n1", failed)
	}
}
