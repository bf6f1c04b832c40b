package main

import (
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// dialRESP connects to addr. The replies it takes nest at most 8 deep:
// the workload's and the control commands' need 1. One request at a time,
// each with its own deadline, so that the recorder knows exactly when a
// request was sent and when its reply came (or did not).
func dialRESP(addr string, timeout time.Duration) (*respwire.Conn, error) {
	c, err := respwire.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	c.Limits.MaxDepth = 8
	return c, nil
}

// command runs one command on a fresh connection (for control requests:
// RAFT.STATUS, DEBUG DIGEST, final reads).
func command(addr string, timeout time.Duration, args ...string) (respwire.Value, error) {
	return respwire.DoAt(addr, timeout, args...)
}
