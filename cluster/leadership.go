// A group's leadership as this node sees it: making a new leader ready
// (a barrier, then an entry announcing its addresses), handing over a
// group this node cannot apply any more, and waiting on Raft's futures,
// which may never resolve (raft#498), with a deadline of our own.

package cluster

import (
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/outcome"
)

// leaderState is this node's part in its group's leadership: whether it
// leads ready (route), transfers it (Transfer), hands it over (Handover,
// handOffAfterFault, handOffHalted).
type leaderState struct {
	// readyTerm is the term in which this node, as leader, finished its
	// barrier and announced its address; 0 when not.
	readyTerm atomic.Uint64
	// transferring counts this node's leadership transfers under way:
	// meanwhile Raft refuses new entries, and commands wait (route).
	transferring atomic.Int32
	// stopping: the node is handing over before it stops (handover.go),
	// and refuses leadership transfers to itself.
	stopping atomic.Bool
	// handingOff: handOffAfterFault is running (diskhandoff.go).
	handingOff atomic.Bool
	// halted tells monitorLeadership that the FSM halted (noteHalt).
	halted chan struct{}
}

// noteHalt tells monitorLeadership that the FSM halted (the FSM's onHalt).
func (l *leaderState) noteHalt() {
	select {
	case l.halted <- struct{}{}:
	default:
	}
}

// monitorLeadership makes a new leader ready: a barrier (every entry of
// earlier terms applied here), then an entry announcing its addresses.
func (n *Node) monitorLeadership() {
	for {
		select {
		case leader := <-n.raft.LeaderCh():
			n.lead.readyTerm.Store(0)
			if leader && n.fsm.halted() != nil {
				n.handOffHalted()
			} else if leader {
				n.becomeReady()
			}
			if leader && n.lead.stopping.Load() {
				// Elected while handing over before a stop (a transfer to
				// it is refused, an election is not): hand over again.
				go n.handOffAgain()
			}
		case <-n.lead.halted:
			if n.raft.State() == raft.Leader {
				n.handOffHalted()
			}
		case <-n.life.closing:
			return
		}
	}
}

// handOffHalted hands the leadership of a group this node cannot apply
// any more to another voter, so the group goes on without it.
func (n *Node) handOffHalted() {
	n.lead.readyTerm.Store(0)
	n.log.Error("this node leads a group whose log it stopped applying: handing the leadership over", "group", n.group)
	if err := n.waitWhileLeader(n.raft.LeadershipTransfer()); err != nil && n.raft.State() == raft.Leader {
		n.log.Error("handing over the leadership of a halted group failed", "group", n.group, "err", err)
	}
}

func (n *Node) becomeReady() {
	for n.raft.State() == raft.Leader {
		term := n.raft.CurrentTerm()
		start := time.Now()
		// The barrier waits for every earlier entry to apply here, which
		// after a restart is the whole replay: no deadline but leadership.
		err := n.waitWhileLeader(n.raft.Barrier(n.cfg.ClusterTimeout))
		if err == nil {
			n.replay.done.Store(true)
			// Before the announcement: a follower forwards to this
			// leader once it sees its address, and by then the version
			// entry has applied there too.
			err = n.raiseToRecorded()
		}
		if err == nil {
			entry := codec.AppendLeaderEntry(nil, codec.Leader{ID: n.cfg.ID, RESP: n.cfg.RESPAddr, Forward: n.fwdAddr})
			err = n.waitWhileLeader(n.raft.Apply(entry, n.cfg.ClusterTimeout))
		}
		if err == nil {
			n.noteSoloVoter() // for readLocally, while Raft's loop is free
			n.raiseVersionAlone()
			n.lead.readyTerm.Store(term)
			n.log.Info("leader ready", "term", term, "barrier", time.Since(start).Round(time.Microsecond))
			n.version.wake("") // a new leader looks at the version at once (version.go)
			return
		}
		select {
		case <-n.life.closing:
			return
		default:
		}
		if n.raft.State() == raft.Leader {
			n.log.Warn("new leader: barrier or announcement failed; retrying", "term", term, "err", err)
			time.Sleep(retryPause)
		}
	}
}

// waitWhileLeader waits for f until it resolves, this node stops leading
// (a raft future may never resolve: raft#498), or the node closes.
func (n *Node) waitWhileLeader(f raft.Future) error {
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case err := <-errc:
			return err
		case <-t.C:
			if n.raft.State() != raft.Leader {
				return raft.ErrLeadershipLost
			}
		case <-n.life.closing:
			return ErrShuttingDown
		}
	}
}

// waitFuture waits for f with a deadline of its own, since a raft future
// may never resolve (raft#498).
func waitFuture(closing <-chan struct{}, f raft.Future, timeout time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-errc:
		return err
	case <-t.C:
		return outcome.ClusterDownError(timeout)
	case <-closing:
		return ErrShuttingDown
	}
}
