package outcome

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// Errors of cluster's that the rule meets (the same codes).
var (
	errLoading     error = errcode.New(errcode.Loading)
	errConnLost    error = errcode.New(errcode.ConnLost)
	errClusterDown error = errcode.New(errcode.ClusterDown)
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
		why        StopCause
		notApplied error
		want       errcode.Code // 0: notApplied itself
	}{
		{"queued, deadline", false, StopDeadline, ClusterDownError(timeout), 0},
		{"queued, loading", false, StopDeadline, errLoading, 0},
		{"queued, closed", false, StopClosed, ErrShuttingDown, 0},
		{"queued, canceled", false, StopCanceled, canceled, 0},
		{"handed over, deadline", true, StopDeadline, ClusterDownError(timeout), errcode.CommitTimeout},
		{"earlier try, loading", true, StopDeadline, errLoading, errcode.CommitTimeout},
		{"earlier try, this one refused on close", true, StopDeadline, ErrShuttingDown, errcode.CommitTimeout},
		{"handed over, closed", true, StopClosed, ErrShuttingDown, errcode.OutcomeUnknown},
		{"handed over, canceled", true, StopCanceled, canceled, 0},
		{"already uncertain", true, StopDeadline, errConnLost, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := GiveUpError(tt.mayApply, tt.why, tt.notApplied, timeout)
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
			if tt.why != StopCanceled {
				if errors.Is(err, ErrUncertain) != tt.mayApply || errors.Is(err, errClusterDown) && tt.mayApply {
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
	for _, from := range []int32{Queued, HandedOver} {
		for range 200 {
			o := &Outcome{}
			o.Reset(nil)
			if from == HandedOver {
				o.HandOver()
			}
			var wg sync.WaitGroup
			var claimed bool
			wg.Add(1)
			go func() {
				defer wg.Done()
				if claimed = o.Claim(from); claimed {
					o.Deliver(Done(nil))
				}
			}()
			st := o.GiveUp()
			wg.Wait()
			switch {
			case st == Claimed && claimed:
				<-o.Delivered() // the deliverer's result
			case st == from && !claimed:
				if o.State() != Abandoned {
					t.Fatalf("gave up in %d, state now %d", st, o.State())
				}
			default:
				t.Fatalf("gave up in %d, claimed %v: want exactly one winner", st, claimed)
			}
		}
	}
}
