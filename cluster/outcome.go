package cluster

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// One outcome, one rule: what a caller of Execute learns about a batch it
// handed on, whether to the group commit (batcher.go's request) or to the
// leader (fwdclient.go's fwdCall).
//
// Both are an outcome: a state word, moved by compare-and-swap, that
// settles the race between the caller, who may give up at any moment (its
// deadline, its context, the node closing), and the goroutine that
// delivers the outcome (the batcher's waiter, the forward connection's
// reader); a done channel; the error and results delivered. Whoever moves
// the state first wins: a caller that gave up never reads a late result,
// and a deliverer that claimed the outcome is waited for, so the results
// slice is never written after the caller returned.
//
// The error a caller that gives up gets is decided in one place,
// giveUpError, from the state it gave up in: an outcome still queued was
// certainly not applied (CLUSTERDOWN, which clients retry); one handed
// over (an entry given to Raft, a request written to the leader) may have
// been (UNCERTAIN, which they do not); and once any try of an Execute call
// may have applied, every later failure of that call is UNCERTAIN too
// (Node.execute). docs/design.md, "Two error codes", is the user's view.

// Outcome states.
const (
	outQueued     int32 = iota // not handed over yet: certainly not applied
	outEncoding                // the batcher is reading its ops (a caller giving up waits it out)
	outHandedOver              // in an entry handed to Raft, or written to the leader: may apply
	outClaimed                 // a deliverer is writing the outcome
	outAbandoned               // the caller gave up
)

// outcome is the state, signal, error and results shared by a caller and
// the goroutine that delivers its batch's outcome.
type outcome struct {
	state   atomic.Int32
	done    chan struct{} // capacity 1: deliver sends once per use
	err     error         // set before done is signalled
	results []engine.Result
}

// claim takes the right to deliver the outcome, if its state is still
// from: false when the caller gave up or another deliverer came first.
func (o *outcome) claim(from int32) bool { return o.state.CompareAndSwap(from, outClaimed) }

// handOver marks a queued outcome handed over (written to the leader):
// false when its caller gave up or it was claimed first.
func (o *outcome) handOver() bool { return o.state.CompareAndSwap(outQueued, outHandedOver) }

// deliver sets the error of a claimed outcome and wakes its caller; the
// results were written before. It is the deliverer's last touch.
func (o *outcome) deliver(err error) {
	o.err = err
	o.done <- struct{}{}
}

// giveUp marks the outcome given up by its caller, waiting out a batcher
// that is reading its ops. It returns the state it was given up in:
// outQueued (certainly not applied) or outHandedOver (may be applied);
// outClaimed when a deliverer came first (the caller must then wait on
// done); outAbandoned if it was given up already.
func (o *outcome) giveUp() int32 {
	for {
		switch s := o.state.Load(); s {
		case outQueued, outHandedOver:
			if o.state.CompareAndSwap(s, outAbandoned) {
				return s
			}
		case outClaimed, outAbandoned:
			return s
		default: // outEncoding: a few microseconds
			runtime.Gosched()
		}
	}
}

// stopCause is why a caller stopped waiting for an outcome.
type stopCause uint8

const (
	stopDeadline stopCause = iota // the call's deadline passed (or no try could be made in time)
	stopCanceled                  // the caller's context ended: no reply is read
	stopClosed                    // this node closed
)

// giveUpError decides the error of a call that ends without an outcome.
// mayApply says whether the call may have been applied: this try was
// handed over (giveUp found outHandedOver), or an earlier try of the same
// Execute call was. notApplied is the error that fits when it certainly
// was not: CLUSTERDOWN naming the timeout, LOADING, shutting down, or the
// context's error.
//
// Certainly not applied: notApplied. A caller whose context ended gets the
// context's error either way (nobody reads the reply). Otherwise the call
// may have applied and the error is UNCERTAIN: notApplied itself when it
// already is, ErrOutcomeUnknown when the node closed, else the commit
// timeout naming timeout.
func giveUpError(mayApply bool, why stopCause, notApplied error, timeout time.Duration) error {
	switch {
	case !mayApply, why == stopCanceled, errors.Is(notApplied, ErrUncertain):
		return notApplied
	case why == stopClosed:
		return ErrOutcomeUnknown
	}
	return commitTimeoutError(timeout)
}
