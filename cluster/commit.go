// What becomes of a log entry the batcher handed to Raft (batcher.go
// gathers it): await waits for its future with a deadline of its own and
// answers its callers; after a lost leadership, resolve learns the entry's
// fate from this node's own log; Raft's refusals are classified into
// attempts (cluster/outcome): not applied, or fate unknown.

package cluster

import (
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/logstore"
	"github.com/sluice-rl/sluice/cluster/outcome"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// await waits for one entry's future, with a deadline of its own, hands
// out the outcome and frees the entry's slot.
//
// It waits on the future itself, and a timer (not a second goroutine and
// a channel: one wake-up less per entry) answers the entry's callers when
// the future gives no outcome in time. Whichever of the two settles the
// entry first answers its callers and frees its slot, and the other does
// nothing: once answered, a request may be recycled for another call, so
// it must never be finished twice.
//
// When this node lost its leadership after Raft appended the entry (a
// leadership transfer: a graceful stop, the balancer, RAFT.TRANSFER; or a
// failover), the entry's fate is decided by the next leader, and this node
// learns it by applying its own log: resolve waits for that, so that the
// callers get the entry's real results, or a retry (to the new leader)
// when another entry took its index; UNCERTAIN only when neither is known
// in time.
func (b *batcher) await(f raft.ApplyFuture, ref entryRef, batch []*request, nops int, start time.Time) {
	var (
		settled atomic.Bool
		index   uint64 // the entry's log index, once Raft answered
	)
	free := func() {
		b.awaiting.Add(-1)
		b.fsm.forget(ref.id, index)
		b.freed <- entryDone{callers: len(batch), took: time.Since(start)} // buffered: never blocks
	}
	watchdog := time.AfterFunc(b.timeout+b.timeout/2, func() {
		if !settled.CompareAndSwap(false, true) {
			return
		}
		// Handed to Raft, no outcome: it may still commit.
		for _, r := range batch {
			finish(r, nil, outcome.Done(outcome.CommitTimeoutError(b.timeout)))
		}
		free()
	})
	err := f.Error() // may never return (raft#498): the watchdog answers then
	if !settled.CompareAndSwap(false, true) {
		return // the watchdog answered the callers
	}
	watchdog.Stop()
	index = f.Index()
	defer free()
	var results []engine.Result
	var a outcome.Attempt // what the callers get; the zero value is outcome.Done(nil): the results
	if err == nil {
		b.entries.Add(1)
		b.ops.Add(uint64(nops))
		b.metrics.committed(time.Since(start))
		results, _ = f.Response().([]engine.Result)
		if results == nil {
			// Not a result slice: the FSM refused the entry (an error).
			a = outcome.Done(internalError("the log entry did not apply: %v", f.Response()))
			if e, isErr := f.Response().(error); isErr && errcode.Is(e, errcode.ApplyHalted) {
				// Committed, so the other replicas apply it; this one halted.
				a = outcome.Done(&errcode.Error{Code: errcode.Uncertain, Detail: "this node stopped applying the log after the command committed", Cause: e})
			}
		}
	} else if errors.Is(err, raft.ErrLeadershipLost) && index > 0 {
		st, rs := b.resolve(ref, index, start.Add(b.timeout+b.timeout/2))
		b.metrics.resolved(st)
		switch st {
		case outcomeApplied:
			a, results = outcome.Done(nil), rs
		case outcomeNotApplied:
			a = outcome.NotApplied(outcome.ErrNotApplied)
		default:
			a = outcome.Attempt{Kind: outcome.TryUnknown}
		}
	} else if f := b.logWriteError(err); f != nil {
		a = outcome.Done(f) // the local append failed: not stored, not replicated
	} else {
		a = classifyApplyError(err)
	}
	if a.Kind == outcome.TryDone && a.Err == nil && len(results) != nops {
		a = outcome.Done(internalError("the log entry did not apply: %d results for %d operations", len(results), nops))
	}
	if a.Kind != outcome.TryDone || a.Err != nil {
		for _, r := range batch {
			finish(r, nil, a)
		}
		return
	}
	off := 0
	for _, r := range batch {
		rs := results[off : off+len(r.ops)]
		off += len(r.ops)
		if r.id != (codec.BatchID{}) && len(rs) > 0 && rs[0].Err == errDuplicateBatch {
			finish(r, nil, outcome.Done(errDuplicateBatch)) // a re-send of a batch that applied
			continue
		}
		finish(r, rs, outcome.Done(nil))
	}
}

// resolvePoll is how often resolve looks at the FSM.
const resolvePoll = 2 * time.Millisecond

// resolve waits until this node's log has applied the index at which the
// entry ref was appended, or until the deadline or the node's close, and
// says what became of the entry (fsm.outcome): applied, with its results;
// not applied (another leader's entry, or none, took the index: the
// callers may be routed again); or unknown.
func (b *batcher) resolve(ref entryRef, index uint64, until time.Time) (int, []engine.Result) {
	t := time.NewTicker(resolvePoll)
	defer t.Stop()
	for {
		if st, rs := b.fsm.outcome(ref.id, index, ref.restores); st != outcomePending {
			return st, rs
		}
		if !time.Now().Before(until) {
			return outcomeUnknown, nil
		}
		select {
		case <-t.C:
		case <-b.closing:
			return outcomeUnknown, nil
		}
	}
}

// classifyApplyError maps a Raft apply error to what the caller may do.
func classifyApplyError(err error) outcome.Attempt {
	switch {
	case errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrLeadershipTransferInProgress),
		errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrAbortedByRestore):
		return outcome.NotApplied(outcome.ErrNotApplied) // refused before it was appended
	}
	return outcome.Attempt{Kind: outcome.TryUnknown} // ErrLeadershipLost, ErrRaftShutdown, ...
}

// logWriteError returns the MISCONF error when err is Raft's answer to an
// entry whose local append failed (cluster/logstore/faultstore.go), else
// nil. Raft's log cache flattens the store's error into text, hence the
// match on it (logstore.FaultedText). Such
// an entry was not stored, so not replicated, and the store deletes any
// part of it a failed write left before it takes another: not applied.
func (b *batcher) logWriteError(err error) error {
	if b.storeFault == nil || !strings.Contains(err.Error(), logstore.FaultedText) {
		return nil
	}
	if f := b.storeFault(); f != nil {
		return f
	}
	return &errcode.Error{Code: errcode.LogWriteFailed, Detail: err.Error()}
}
