// Package testkit holds what sluice's tests and test tools share to wait,
// serve and break networks: Eventually (poll a condition with a deadline,
// the model is hashicorp/raft's WaitFor and NATS's checkFor) instead of
// sleeps, Listen and Serve for fake servers on free ports, and LinkProxy, a
// TCP proxy whose link can drop, stall or reject (the chaos suite's
// partitions and cmd/sluice's partition tests).
package testkit

import (
	"fmt"
	"testing"
	"time"
)

// Poll calls fn every interval until it returns nil, and returns nil; once
// timeout has passed, it returns fn's last error instead. fn runs at least
// once.
func Poll(timeout, interval time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}

// Eventually calls fn every interval until it returns nil; if it still
// fails once timeout has passed, the test fails with fn's last error.
func Eventually(t testing.TB, timeout, interval time.Duration, fn func() error) {
	t.Helper()
	if err := Poll(timeout, interval, fn); err != nil {
		t.Fatal(err)
	}
}
