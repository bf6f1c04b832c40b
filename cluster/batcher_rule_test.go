package cluster

import "testing"

// TestSubmitNow: when the batcher hands the entry it gathers to Raft.
func TestSubmitNow(t *testing.T) {
	b := &batcher{fill: 256, maxInflight: 4}
	cases := []struct {
		name     string
		nops     int
		full     bool
		inflight int
		want     bool
	}{
		{"nothing gathered", 0, false, 0, false},
		{"idle: at once", 1, false, 0, true},
		{"busy, below the fill: keeps gathering", 100, false, 1, false},
		{"busy, at the fill", 256, false, 1, true},
		{"busy, full below the fill", 40, true, 2, true},
		{"low concurrency: a second small entry waits", 20, false, 1, false},
		{"P1: the entry in flight was answered, the gathered one goes at once", 25, false, 0, true},
		{"no slot free, even when full", 1024, true, 4, false},
	}
	for _, c := range cases {
		if got := b.submitNow(c.nops, c.full, c.inflight); got != c.want {
			t.Errorf("%s: submitNow(%d, %v, %d) = %v, want %v", c.name, c.nops, c.full, c.inflight, got, c.want)
		}
	}
}
