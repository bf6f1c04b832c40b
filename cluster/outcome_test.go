package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// TestGiveUpError: the one rule for a call that ends without an outcome.
// Certainly not applied keeps its not-applied error (CLUSTERDOWN and its
// kin); once the call may have applied, every cause but the caller's own
// cancellation is UNCERTAIN, and never both classes.
func TestGiveUpError(t *testing.T) {
	const timeout = 1500 * time.Millisecond
	canceled := fmt.Errorf("cluster: execute: %w", context.Canceled)
	for _, tt := range []struct {
		name       string
		mayApply   bool
		why        stopCause
		notApplied error
		want       errcode.Code // 0: notApplied itself
	}{
		{"queued, deadline", false, stopDeadline, clusterDownError(timeout), 0},
		{"queued, loading", false, stopDeadline, ErrLoading, 0},
		{"queued, closed", false, stopClosed, ErrShuttingDown, 0},
		{"queued, canceled", false, stopCanceled, canceled, 0},
		{"handed over, deadline", true, stopDeadline, clusterDownError(timeout), errcode.CommitTimeout},
		{"earlier try, loading", true, stopDeadline, ErrLoading, errcode.CommitTimeout},
		{"earlier try, this one refused on close", true, stopDeadline, ErrShuttingDown, errcode.CommitTimeout},
		{"handed over, closed", true, stopClosed, ErrShuttingDown, errcode.OutcomeUnknown},
		{"handed over, canceled", true, stopCanceled, canceled, 0},
		{"already uncertain", true, stopDeadline, errConnLost, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := giveUpError(tt.mayApply, tt.why, tt.notApplied, timeout)
			if tt.want == 0 {
				if err != tt.notApplied {
					t.Fatalf("got %v, want %v itself", err, tt.notApplied)
				}
			} else if e := errcode.Of(err); e == nil || e.Code != tt.want {
				t.Fatalf("got %v, want code %v", err, tt.want)
			}
			if tt.want == errcode.CommitTimeout && errcode.Of(err).Num != int64(timeout) {
				t.Fatalf("got %v, want the timeout %v named", err, timeout)
			}
			if tt.why != stopCanceled {
				if errors.Is(err, ErrUncertain) != tt.mayApply || errors.Is(err, ErrClusterDown) && tt.mayApply {
					t.Fatalf("got %v: UNCERTAIN is %v, want %v", err, errors.Is(err, ErrUncertain), tt.mayApply)
				}
			}
		})
	}
}

// TestOutcomeRace: a caller giving up and a deliverer claiming race on one
// outcome; exactly one wins, and the caller's error follows the state it
// gave up in (queued: not applied; handed over: may have applied).
func TestOutcomeRace(t *testing.T) {
	for _, from := range []int32{outQueued, outHandedOver} {
		for range 200 {
			o := &outcome{done: make(chan struct{}, 1)}
			o.state.Store(from)
			var wg sync.WaitGroup
			var claimed bool
			wg.Add(1)
			go func() {
				defer wg.Done()
				if claimed = o.claim(from); claimed {
					o.deliver(done(nil))
				}
			}()
			st := o.giveUp()
			wg.Wait()
			switch {
			case st == outClaimed && claimed:
				<-o.done // the deliverer's result
			case st == from && !claimed:
				if o.state.Load() != outAbandoned {
					t.Fatalf("gave up in %d, state now %d", st, o.state.Load())
				}
			default:
				t.Fatalf("gave up in %d, claimed %v: want exactly one winner", st, claimed)
			}
		}
	}
}

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
		r.state.Store(outHandedOver)
		finish(r, answer, done(nil))
		if a := b.wait(context.Background(), deadline, req); a.kind != tryDone || a.err != nil {
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
