// Package outcome is what a caller of cluster's Execute learns about a
// batch it handed on, whether to the group commit (cluster's batcher) or
// to the leader (cluster/forward's client): one state machine and one
// rule for both.
//
// Both are an Outcome: a state word, moved by compare-and-swap, that
// settles the race between the caller, who may give up at any moment (its
// deadline, its context, the node closing), and the goroutine that
// delivers the outcome (the batcher's waiter, the forward connection's
// reader); a done channel; the attempt and results delivered. Whoever
// moves the state first wins: a caller that gave up never reads a late
// result, and a deliverer that claimed the outcome is waited for, so the
// results slice is never written after the caller returned.
//
// The error a caller that gives up gets is decided in one place,
// GiveUpError, from the state it gave up in: an outcome still queued was
// certainly not applied (CLUSTERDOWN, which clients retry); one handed
// over (an entry given to Raft, a request written to the leader) may have
// been (UNCERTAIN, which they do not); and once any try of an Execute call
// may have applied, every later failure of that call is UNCERTAIN too
// (cluster's Node.execute). docs/design.md, "Two error codes", is the
// user's view.
package outcome

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Outcome states.
const (
	Queued     int32 = iota // not handed over yet: certainly not applied
	Encoding                // the batcher is reading its ops (a caller giving up waits it out)
	HandedOver              // in an entry handed to Raft, or written to the leader: may apply
	Claimed                 // a deliverer is writing the outcome
	Abandoned               // the caller gave up
)

// Outcome is the state, signal, attempt and results shared by a caller
// and the goroutine that delivers its batch's outcome. Reset readies it
// for a use; it may be reused once its caller received the outcome.
type Outcome struct {
	state   atomic.Int32
	done    chan struct{} // capacity 1: Deliver sends once per use
	res     Attempt       // set before done is signalled
	results []engine.Result
}

// Attempt is what one try of a batch came to: what the batcher's waiter
// or the forward connection delivers, and what Node.execute's loop
// switches on. Whether to route again or send again is its kind, never an
// error: an error is only ever the reply.
type Attempt struct {
	Kind TryKind
	// Err: for TryDone, the reply (nil: the results are filled); for
	// TryNotApplied, why, when one is known (the text a leader's retry
	// status carries); nil otherwise.
	Err error
}

// TryKind says what a caller may do after a try.
type TryKind uint8

const (
	// TryDone: answered; Err is the batch's reply.
	TryDone TryKind = iota
	// TryNotApplied: certainly not applied (Raft refused the entry before
	// appending it, the request was never written to the leader, the
	// leader answered "route again"): route it again.
	TryNotApplied
	// TryWritten: written to the leader, then its connection broke before
	// the answer: it may have applied; send it again with the same batch
	// ID, which the log applies at most once.
	TryWritten
	// TryUnknown: handed to Raft, then leadership was lost and the log
	// told nothing of the entry's fate in time (or, from a leader, so
	// reported: ErrOutcomeUnknown on the wire): it may have applied.
	TryUnknown
)

// Done is the attempt that answers with err (nil: the results).
func Done(err error) Attempt { return Attempt{Kind: TryDone, Err: err} }

// NotApplied is the attempt refused before it could apply, for why.
func NotApplied(why error) Attempt { return Attempt{Kind: TryNotApplied, Err: why} }

// Reply is the error an attempt stands for, for the callers that only
// need one (a ping, a log line): its reply when done, else the kind.
func (a Attempt) Reply() error {
	switch a.Kind {
	case TryDone:
		return a.Err
	case TryNotApplied:
		return ErrNotApplied
	case TryWritten:
		return errWrittenLost
	}
	return ErrOutcomeUnknown
}

// Reset readies o for a use whose results go to results: queued, nothing
// delivered.
func (o *Outcome) Reset(results []engine.Result) {
	if o.done == nil {
		o.done = make(chan struct{}, 1)
	}
	o.results, o.res = results, Attempt{}
	o.state.Store(Queued)
}

// Delivered is signalled once the outcome was delivered: Attempt then
// holds it.
func (o *Outcome) Delivered() <-chan struct{} { return o.done }

// Attempt is the attempt delivered; read it after Delivered.
func (o *Outcome) Attempt() Attempt { return o.res }

// Results is where the deliverer writes the results.
func (o *Outcome) Results() []engine.Result { return o.results }

// State is the state now.
func (o *Outcome) State() int32 { return o.state.Load() }

// Claim takes the right to deliver the outcome, if its state is still
// from: false when the caller gave up or another deliverer came first.
func (o *Outcome) Claim(from int32) bool { return o.state.CompareAndSwap(from, Claimed) }

// HandOver marks a queued outcome handed over (written to the leader):
// false when its caller gave up or it was claimed first.
func (o *Outcome) HandOver() bool { return o.state.CompareAndSwap(Queued, HandedOver) }

// StartEncoding marks a queued outcome's ops being read by the batcher
// (Encoded ends it): false when its caller gave up first.
func (o *Outcome) StartEncoding() bool { return o.state.CompareAndSwap(Queued, Encoding) }

// Encoded marks an outcome whose ops were read handed over (in an entry
// given to Raft).
func (o *Outcome) Encoded() { o.state.Store(HandedOver) }

// Abandon gives up an outcome still queued: false when it was taken
// already.
func (o *Outcome) Abandon() bool { return o.state.CompareAndSwap(Queued, Abandoned) }

// Deliver sets the attempt of a claimed outcome and wakes its caller;
// the results were written before. It is the deliverer's last touch.
func (o *Outcome) Deliver(a Attempt) {
	o.res = a
	o.done <- struct{}{}
}

// GiveUp marks the outcome given up by its caller, waiting out a batcher
// that is reading its ops. It returns the state it was given up in:
// Queued (certainly not applied) or HandedOver (may be applied); Claimed
// when a deliverer came first (the caller must then wait on Delivered);
// Abandoned if it was given up already.
func (o *Outcome) GiveUp() int32 {
	for {
		switch s := o.state.Load(); s {
		case Queued, HandedOver:
			if o.state.CompareAndSwap(s, Abandoned) {
				return s
			}
		case Claimed, Abandoned:
			return s
		default: // Encoding: a few microseconds
			runtime.Gosched()
		}
	}
}

// StopCause is why a caller stopped waiting for an outcome.
type StopCause uint8

const (
	StopDeadline StopCause = iota // the call's deadline passed (or no try could be made in time)
	StopCanceled                  // the caller's context ended: no reply is read
	StopClosed                    // this node closed
)

// GiveUpError decides the error of a call that ends without an outcome.
// mayApply says whether the call may have been applied: this try was
// handed over (GiveUp found HandedOver), or an earlier try of the same
// Execute call was. notApplied is the error that fits when it certainly
// was not: CLUSTERDOWN naming the timeout, LOADING, shutting down, or the
// context's error.
//
// Certainly not applied: notApplied. A caller whose context ended gets the
// context's error either way (nobody reads the reply). Otherwise the call
// may have applied and the error is UNCERTAIN: notApplied itself when it
// already is, ErrOutcomeUnknown when the node closed, else the commit
// timeout naming timeout.
func GiveUpError(mayApply bool, why StopCause, notApplied error, timeout time.Duration) error {
	switch {
	case !mayApply, why == StopCanceled, errors.Is(notApplied, ErrUncertain):
		return notApplied
	case why == StopClosed:
		return ErrOutcomeUnknown
	}
	return CommitTimeoutError(timeout)
}
