// The request path of one group: Execute and its loop of tries (execute),
// where each try goes (route: apply here, forward to the leader, wait for
// one), what a leader does with a follower's forwarded batch
// (acceptForwarded), and the answers of a node whose own log cannot be
// written (storeFault, readLocally). Each try goes through a
// forward.Submitter (the batcher here, the forward client to the leader)
// and comes to an outcome.Attempt; node.go builds and closes the node.

package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/cluster/outcome"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// Execute implements resp.Executor: it runs ops as one batch through the
// log, on the leader directly or forwarded to it, and fills results.
//
// Errors (coded: internal/errcode): ErrClusterDown's kind when the
// batch was certainly not applied and no majority took it within
// ClusterTimeout (there is no leader, or it cannot reach a quorum);
// ErrUncertain's kind when it may have been applied but no outcome came
// (handed to Raft and no answer in time, the connection to the leader
// broke and no re-send was answered in time, leadership changed and the
// log did not tell the entry's fate in time); ErrLoading when this node
// was still replaying its log, with no leader to forward to, for the whole
// timeout; ErrShuttingDown after Close. Batches that certainly did not
// reach the log (not the leader any more, a leadership transfer, no leader
// yet) are routed again within the timeout; a forwarded batch that may
// have reached it is sent again only with its batch ID, which the log
// applies at most once.
func (n *Node) Execute(ctx context.Context, ops []engine.Op, results []engine.Result) error {
	if len(ops) != len(results) {
		return internalError("%d results for %d operations", len(results), len(ops))
	}
	if len(ops) == 0 {
		return nil
	}
	if err := n.stopped(); err != nil {
		return err
	}
	if cv := n.gateVersion(); n.fsm.needs.gated(cv, ops) {
		// A node still starting (replaying its log, its leader not ready
		// yet) may be about to learn a higher version: wait for a ready
		// leader (bounded by the cluster timeout), then look again.
		wctx, cancel := context.WithTimeout(ctx, n.cfg.ClusterTimeout)
		_ = n.WaitReady(wctx)
		cancel()
		if cv = n.gateVersion(); n.fsm.needs.gated(cv, ops) {
			return n.executeGated(ctx, cv, ops, results)
		}
	}
	return n.execute(ctx, ops, results)
}

// stopped returns why the node serves no command any more (it is shutting
// down, it halted applying its log, it was removed), or nil.
func (n *Node) stopped() error {
	select {
	case <-n.life.closing:
		return ErrShuttingDown
	default:
	}
	if n.fsm.halted() != nil {
		return n.fsm.haltError()
	}
	if n.membership.removed.Load() {
		return ErrRemoved
	}
	return nil
}

// executeGated answers the ops of a batch that the group's cluster version
// cv refuses (version.go, refusal: errcode.ClusterVersion for an op the
// version does not have; not applied, never proposed), and runs the others
// as one batch.
func (n *Node) executeGated(ctx context.Context, cv uint32, ops []engine.Op, results []engine.Result) error {
	var idx []int
	var sub []engine.Op
	for i := range ops {
		if err := n.fsm.needs.refusal(cv, &ops[i]); err != nil {
			results[i] = engine.Result{Err: err}
			continue
		}
		idx = append(idx, i)
		sub = append(sub, ops[i])
	}
	if len(sub) == 0 {
		return nil
	}
	subResults := make([]engine.Result, len(sub))
	if err := n.execute(ctx, sub, subResults); err != nil {
		return err
	}
	for j, i := range idx {
		results[i] = subResults[j]
	}
	return nil
}

// execute is Execute past the halt and the gate: a loop over tries, each
// routed (route: apply here, forward to the leader, wait) and made through
// the routing's forward.Submitter, whose attempt
// (cluster/outcome) says what comes next: the answer, route again (not
// applied), send again with the same batch ID (written to a leader, fate
// unknown), or UNCERTAIN once a leader is known again (handed to Raft
// here, fate unknown).
func (n *Node) execute(ctx context.Context, ops []engine.Op, results []engine.Result) error {
	start := time.Now()
	until := start.Add(n.cfg.ClusterTimeout)
	deadline := n.timers.get(n.cfg.ClusterTimeout)
	defer n.timers.put(deadline)
	var (
		pause   *time.Timer
		id      codec.BatchID // given at the first forward, kept by every later try
		sent    bool          // a try was written and its outcome is unknown
		loading bool          // the last try found the node replaying
	)
	for {
		r := n.route()
		if r.kind == routeForward && id == (codec.BatchID{}) {
			id = n.fwd.NewBatchID()
		}
		a := outcome.NotApplied(nil) // no leader to take it (yet)
		if r.via != nil {
			// The one call a try makes, through the routing's submitter.
			// The batcher gets the batch ID too: after a forwarded try
			// that may have applied (this node became the leader
			// meanwhile), the log applies the batch at most once.
			a = r.via.Submit(ctx, deadline.C, forward.Batch{ID: id, Ops: ops, Results: results, Addr: r.addr, Until: until})
		}
		switch r.kind {
		case routeForward:
			if a.Kind != outcome.TryNotApplied && a.Kind != outcome.TryWritten {
				n.metrics.forwarded(len(ops))
			}
			if a.Kind == outcome.TryWritten || a.Kind == outcome.TryUnknown {
				// Written, then the connection broke or the leader lost its
				// leadership: send it again, same ID, while that is safe.
				sent = true
				if time.Since(start) >= forward.ResendWindow {
					return forward.ErrConnLost
				}
				a = outcome.NotApplied(nil)
			}
		case routeLoading:
			// Still replaying, and no leader to forward to known yet: hold
			// the batch as while there is no leader (the replay soon tells
			// the leader's address); LOADING if that takes the whole
			// timeout.
			loading = true
		case routeWait:
			loading = false
		}
		switch a.Kind {
		case outcome.TryDone:
			if e := errcode.Of(a.Err); sent && e != nil && e.Code.Class() == errcode.Unavailable {
				// This try was not applied, but an earlier one may have been.
				return outcome.GiveUpError(true, outcome.StopDeadline, a.Err, n.cfg.ClusterTimeout)
			}
			return a.Err
		case outcome.TryUnknown: // handed to Raft here
			return n.awaitLeaderAfterLoss(ctx, deadline.C)
		}
		// Not applied: route again shortly.
		if !sent && time.Since(start) >= misconfWait {
			// No leader to take it, and this node's own log cannot be
			// written: say so (disk faults, cluster/logstore/faultstore.go),
			// or answer reads from the state when no other node can have
			// moved on.
			if f := n.storeFault(); f != nil {
				if n.readLocally(ops, results) {
					return nil
				}
				return f
			}
		}
		if pause == nil {
			pause = time.NewTimer(retryPause)
			defer pause.Stop()
		} else {
			pause.Reset(retryPause)
		}
		select {
		case <-pause.C:
		case <-deadline.C:
			notApplied := outcome.ClusterDownError(n.cfg.ClusterTimeout)
			if loading {
				notApplied = ErrLoading
			}
			return outcome.GiveUpError(sent, outcome.StopDeadline, notApplied, n.cfg.ClusterTimeout)
		case <-ctx.Done():
			return outcome.GiveUpError(sent, outcome.StopCanceled, fmt.Errorf("cluster: execute: %w", ctx.Err()), n.cfg.ClusterTimeout)
		case <-n.life.closing:
			return outcome.GiveUpError(sent, outcome.StopClosed, ErrShuttingDown, n.cfg.ClusterTimeout)
		}
	}
}

// awaitLeaderAfterLoss decides how to report a batch whose outcome became
// unknown when leadership changed: UNCERTAIN either way, saying whether a
// leader is known again before the command's deadline (the cluster works)
// or none is (no majority).
func (n *Node) awaitLeaderAfterLoss(ctx context.Context, deadline <-chan time.Time) error {
	t := time.NewTicker(retryPause)
	defer t.Stop()
	for {
		if kind := n.route().kind; kind == routeLocal || kind == routeForward {
			return ErrOutcomeUnknown
		}
		select {
		case <-t.C:
		case <-deadline:
			return lostQuorumError(n.cfg.ClusterTimeout)
		case <-ctx.Done():
			return ErrOutcomeUnknown
		case <-n.life.closing:
			return ErrOutcomeUnknown
		}
	}
}

// retryPause is how long Execute waits before routing again while there
// is no usable leader (an election, a new leader's barrier).
const retryPause = 5 * time.Millisecond

// routing is where a batch should go now (route): the decision, the
// forward.Submitter a try goes through (the batcher here, the forward
// client to the leader; nil while it waits), and the address it needs.
type routing struct {
	kind routeKind
	via  forward.Submitter
	addr string // routeForward: the leader's forward address (dial-mapped)
}

// routeKind is route's decision.
type routeKind int

const (
	routeWait    routeKind = iota // no usable leader yet
	routeLocal                    // this node leads and is ready
	routeForward                  // forward to the leader's address
	routeLoading                  // still replaying, and nothing better known
)

// route says where a batch should go now.
//
// A node still replaying its log at start forwards to the leader whenever
// it knows the leader's forward address: from its own log, or else from
// another group of its host (every group of a member has the same
// address); routeLoading only when it knows none (or leads while
// replaying).
func (n *Node) route() routing {
	if n.raft.State() == raft.Leader {
		if n.lead.transferring.Load() > 0 {
			return routing{kind: routeWait} // Raft refuses entries until it is done
		}
		if n.lead.readyTerm.Load() == n.raft.CurrentTerm() {
			return routing{kind: routeLocal, via: n.batcher}
		}
		if !n.isReplayed() {
			return routing{kind: routeLoading}
		}
		return routing{kind: routeWait}
	}
	_, id := n.raft.LeaderWithID()
	if id == "" || string(id) == n.cfg.ID {
		return routing{kind: routeWait}
	}
	if e, ok := n.fsm.leader(string(id)); ok && e.Forward != "" {
		return routing{kind: routeForward, via: n.fwd, addr: peer.MapAddr(n.cfg.DialMap, e.Forward)}
	}
	if e, ok := n.peers(string(id)); ok && e.Forward != "" {
		return routing{kind: routeForward, via: n.fwd, addr: peer.MapAddr(n.cfg.DialMap, e.Forward)}
	}
	if !n.isReplayed() {
		return routing{kind: routeLoading}
	}
	return routing{kind: routeWait}
}

// replayState is the replay of the log a node started with: start is the
// index of the last command entry in the log at start; until the FSM has
// applied it, the node is replaying. done: it has (or a barrier of this
// node's as leader applied).
type replayState struct {
	start uint64
	done  atomic.Bool
}

// isReplayed reports whether the FSM has applied the log this node started
// with.
func (n *Node) isReplayed() bool {
	if n.replay.done.Load() {
		return true
	}
	if n.fsm.applied.Load() >= n.replay.start {
		n.replay.done.Store(true)
		return true
	}
	return false
}

// acceptForwarded queues a batch forwarded by a follower, if this node is
// the ready leader. Otherwise it returns no request and the status to
// answer: retry (not applied; the follower routes again) or an error.
func (n *Node) acceptForwarded(ctx context.Context, deadline <-chan time.Time, id codec.BatchID, ops []engine.Op, results []engine.Result) (forward.Pending, byte, error) {
	if n.fsm.halted() != nil {
		return nil, forward.StatusRetry, errors.New("this node stopped applying the log")
	}
	// The follower gated its ops with its own view of the version, which
	// is never ahead of the leader's; this catches a follower of a newer
	// release sending an operation this one does not know.
	if cv := n.gateVersion(); n.fsm.needs.gated(cv, ops) {
		for i := range ops {
			if err := n.fsm.needs.refusal(cv, &ops[i]); err != nil {
				return nil, forward.StatusError, err
			}
		}
	}
	switch n.route().kind {
	case routeLocal:
		req, err := n.batcher.enqueue(ctx, deadline, id, ops, results)
		if err != nil {
			return nil, forward.StatusError, err
		}
		return req, 0, nil
	}
	// Not the ready leader (a follower, an election, a transfer, or a
	// leader still replaying): the follower holds the batch and routes it
	// again, rather than failing it with LOADING.
	return nil, forward.StatusRetry, errors.New("not the ready leader")
}

// misconfWait is how long Execute looks for a leader, while this node's
// log cannot be written, before it answers MISCONF: long enough for the
// other nodes to elect a leader once this one stepped down, well within
// the second the contract allows.
const misconfWait = 500 * time.Millisecond

// storeFault returns the MISCONF error while this node's log store cannot
// be written, else nil.
func (n *Node) storeFault() error {
	if n.stores == nil {
		return nil
	}
	return n.stores.Fault()
}

// readLocally answers ops from this node's engine when they are all reads
// and this node is the group's only voter, whose log cannot be written:
// nothing can commit anywhere meanwhile, so the state once every committed
// entry has applied is the latest, and the ops read it at the clock's last
// applied time (so that they record no time). It reports whether it
// answered.
func (n *Node) readLocally(ops []engine.Op, results []engine.Result) bool {
	for i := range ops {
		if ops[i].Code.Mutates() {
			return false
		}
	}
	// Raft's main loop may be held in a write of its term (the disk is
	// full: cluster/logstore/faultstore.go): then the configuration last
	// seen stands.
	n.noteSoloVoter()
	if !n.membership.soloVoter.Load() {
		return false
	}
	for deadline := time.Now().Add(time.Second); n.fsm.applied.Load() < n.raft.CommitIndex(); {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	cs := n.eng.ClockState()
	n.eng.Apply(cs.Last-cs.Offset, ops, results)
	return true
}

// noteSoloVoter records whether this node is its group's only voter, from
// the latest configuration, when Raft answers within 200 ms.
func (n *Node) noteSoloVoter() {
	if f := n.raft.GetConfiguration(); waitFuture(n.life.closing, f, 200*time.Millisecond) == nil {
		servers := f.Configuration().Servers
		n.membership.soloVoter.Store(len(servers) == 1 && string(servers[0].ID) == n.cfg.ID && servers[0].Suffrage == raft.Voter)
	}
}
