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

// outcome is the state, signal, attempt and results shared by a caller
// and the goroutine that delivers its batch's outcome.
type outcome struct {
	state   atomic.Int32
	done    chan struct{} // capacity 1: deliver sends once per use
	res     attempt       // set before done is signalled
	results []engine.Result
}

// attempt is what one try of a batch came to: what the batcher's waiter
// or the forward connection delivers, and what Node.execute's loop
// switches on. Whether to route again or send again is its kind, never an
// error: an error is only ever the reply.
type attempt struct {
	kind tryKind
	// err: for tryDone, the reply (nil: the results are filled); for
	// tryNotApplied, why, when one is known (the text a leader's retry
	// status carries); nil otherwise.
	err error
}

// tryKind says what a caller may do after a try.
type tryKind uint8

const (
	// tryDone: answered; err is the batch's reply.
	tryDone tryKind = iota
	// tryNotApplied: certainly not applied (Raft refused the entry before
	// appending it, the request was never written to the leader, the
	// leader answered "route again"): route it again.
	tryNotApplied
	// tryWritten: written to the leader, then its connection broke before
	// the answer: it may have applied; send it again with the same batch
	// ID, which the log applies at most once.
	tryWritten
	// tryUnknown: handed to Raft, then leadership was lost and the log
	// told nothing of the entry's fate in time (or, from a leader, so
	// reported: ErrOutcomeUnknown on the wire): it may have applied.
	tryUnknown
)

// done is the attempt that answers with err (nil: the results).
func done(err error) attempt { return attempt{kind: tryDone, err: err} }

// notApplied is the attempt refused before it could apply, for why.
func notApplied(why error) attempt { return attempt{kind: tryNotApplied, err: why} }

// reply is the error an attempt stands for, for the callers that only
// need one (a ping, a log line): its reply when done, else the kind.
func (a attempt) reply() error {
	switch a.kind {
	case tryDone:
		return a.err
	case tryNotApplied:
		return errNotApplied
	case tryWritten:
		return errWrittenLost
	}
	return ErrOutcomeUnknown
}

// claim takes the right to deliver the outcome, if its state is still
// from: false when the caller gave up or another deliverer came first.
func (o *outcome) claim(from int32) bool { return o.state.CompareAndSwap(from, outClaimed) }

// handOver marks a queued outcome handed over (written to the leader):
// false when its caller gave up or it was claimed first.
func (o *outcome) handOver() bool { return o.state.CompareAndSwap(outQueued, outHandedOver) }

// deliver sets the attempt of a claimed outcome and wakes its caller;
// the results were written before. It is the deliverer's last touch.
func (o *outcome) deliver(a attempt) {
	o.res = a
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
