package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/outcome"
	"github.com/sluice-rl/sluice/engine"
)

// TestBatcherRoundTripAllocs: a request's way through the batcher's side
// of the outcome (enqueue, hand-over, finish, wait, back to the pool)
// allocates nothing once the pool holds a request.
func TestBatcherRoundTripAllocs(t *testing.T) {
	b := &batcher{timeout: time.Second, closing: make(chan struct{}), reqs: make(chan *request, 1)}
	ops := []engine.Op{{Code: engine.OpDecide, Key: []byte("k"), Rule: tokenRule, Cost: 1}}
	results := make([]engine.Result, 1)
	answer := []engine.Result{{Allowed: true}}
	deadline := make(chan time.Time)
	round := func() {
		req, err := b.enqueue(context.Background(), deadline, codec.BatchID{}, ops, results)
		if err != nil {
			t.Fatal(err)
		}
		r := <-b.reqs
		r.HandOver()
		finish(r, answer, outcome.Done(nil))
		if a := b.wait(context.Background(), deadline, req); a.Kind != outcome.TryDone || a.Err != nil {
			t.Fatalf("attempt %+v, want done", a)
		}
	}
	round() // fills the pool
	if n := testing.AllocsPerRun(200, round); n > 0.1 {
		t.Fatalf("%.2f allocations per request, want 0", n)
	}
	if !results[0].Allowed {
		t.Fatal("the result was not delivered")
	}
}
