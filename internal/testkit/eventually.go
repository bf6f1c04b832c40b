// Package testkit holds what sluice's tests and test tools share to wait,
// serve and break networks: Poll and Eventually (poll a condition with a
// deadline, the model is hashicorp/raft's WaitFor and NATS's checkFor)
// instead of sleeps, Listen and Serve for fake servers on free ports, and
// LinkProxy, a TCP proxy whose link can drop, stall or reject (the chaos
// suite's partitions and cmd/sluice's partition tests).
//
// testkit does not import package testing: the test tools that are
// programs (the chaos suite, the benchmark tool) use Poll, PollContext and
// LinkProxy too. What needs a test takes a TB, which *testing.T and
// *testing.B satisfy.
package testkit

import (
	"context"
	"fmt"
	"time"
)

// TB is the part of testing.TB that testkit's helpers use.
type TB interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
}

// Poll calls fn every interval until it returns nil, and returns nil; once
// timeout has passed, it returns fn's last error instead. fn runs at least
// once.
func Poll(timeout, interval time.Duration, fn func() error) error {
	return PollContext(context.Background(), timeout, interval, fn)
}

// PollContext is Poll that also gives up when ctx ends, with ctx's error
// and fn's last one.
func PollContext(ctx context.Context, timeout, interval time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	var t *time.Timer
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		if t == nil {
			t = time.NewTimer(interval)
			defer t.Stop()
		} else {
			t.Reset(interval)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		}
	}
}

// Eventually calls fn every interval until it returns nil; if it still
// fails once timeout has passed, the test fails with fn's last error.
func Eventually(t TB, timeout, interval time.Duration, fn func() error) {
	t.Helper()
	if err := Poll(timeout, interval, fn); err != nil {
		t.Fatal(err)
	}
}
