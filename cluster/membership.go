package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// Membership changes (docs/design.md, "Membership"): RAFT.JOIN and
// RAFT.REMOVE with any number of groups, sent to any node.
//
// Every group changes its configuration on its own leader, which may be a
// different node for every group. The node that takes the command (the
// coordinator) runs one step per group, all groups at once, and waits for
// them: in a group this node leads it runs the step itself, otherwise it
// sends the step to the group's leader over that leader's forward listener
// (a connection of its own, with the cluster's TLS, like address
// announcements). A step that lands on a node that is not, or no longer,
// the leader answers "route again", and the coordinator tries the group's
// current leader until its deadline.
//
// Every step is idempotent: it reads the group's configuration, does the
// one change that moves it closer to the goal, passing the
// configuration's index as prevIndex (so a change is refused if another
// landed since, and the step reads again), and loops until the goal holds.
// A leader change midway costs a retry, never a wrong change, and sending
// the command again resumes where it stopped.
//
// A join makes the node a non-voter of the group (it receives the log but
// counts toward no quorum), waits until the entries it has applied trail
// the leader's log by at most catchUpTrail, asking the node itself how far
// it is (over its forward listener, once it has announced its addresses
// through the log, which a non-voter does as any follower), then promotes
// it to voter. A voter added before it has the log would count toward the
// quorum while unable to acknowledge anything: with one member down, a
// slow catch-up would stop the group. Waiting for its state, not only its
// log, means that a leadership handed to it at once (the balancer does)
// does not wait for it to apply a backlog.
//
// A removal first checks every group (etcd's strict reconfiguration
// check: after the removal, the voters whose leader's heartbeats have not
// failed must still be a majority), then removes the node from each; a
// leader asked to remove itself first hands its leadership over and
// answers "route again".
//
// A step travels as the control channel's method "member"
// (controlmethods.go; before the channel, the hello "SLFM\x01": legacy.go).
const (
	// maxMemberTimeout bounds how long a leader works on one step.
	maxMemberTimeout = 30 * time.Minute
	// catchUpTrail: a non-voter whose log ends at most this many entries
	// before the leader's has caught up.
	catchUpTrail = 256
	// catchUpStall: a non-voter whose log has not grown for this long has
	// stopped catching up; the join fails and the node stays a non-voter.
	catchUpStall = 30 * time.Second
	// catchUpPoll is how often a leader asks a non-voter how far it is.
	catchUpPoll = 100 * time.Millisecond
)

// memberOp is a membership step.
type memberOp byte

const (
	opJoin        memberOp = 1 + iota // non-voter, catch up, voter
	opRemove                          // strict check, hand leadership over, remove
	opRemoveCheck                     // the strict check alone
	opProgress                        // this node's applied index of the group
)

func (op memberOp) String() string {
	switch op {
	case opJoin:
		return "join"
	case opRemove, opRemoveCheck:
		return "remove"
	case opProgress:
		return "progress"
	}
	return fmt.Sprintf("op %d", byte(op))
}

// memberState is what this node knows of its own membership of the group
// (noteRemoved, readLocally) and, as leader, of the other members
// (strictCheck, the balancer).
type memberState struct {
	// removed: the group's latest configuration no longer has this node,
	// which was a member (noteRemoved); it serves the group no more.
	// wasMember: a configuration seen since the start had it;
	// lackedAtStart: the log's configuration at start did not (a node
	// removed while it was down).
	removed, wasMember, lackedAtStart atomic.Bool
	// soloVoter: the configuration last seen has this node as its only
	// voter (readLocally).
	soloVoter atomic.Bool
	// health is what this node, as leader, knows of its followers from its
	// heartbeats; busy counts the membership steps it is running.
	health *peerHealth
	busy   atomic.Int32
}

// peerHealth is what a leader knows of its followers' health from its own
// heartbeats: a follower is healthy unless its last heartbeat failed, and
// the record starts afresh whenever this node becomes leader.
type peerHealth struct {
	self    raft.ServerID
	mu      sync.Mutex
	since   time.Time // when this node last became leader (or started watching)
	failing map[raft.ServerID]bool
}

func newPeerHealth(self string) *peerHealth {
	return &peerHealth{self: raft.ServerID(self), since: time.Now(), failing: map[raft.ServerID]bool{}}
}

// observe is a raft observer's filter: it records the observation and
// never passes it on (it runs in raft's goroutines: quick).
func (h *peerHealth) observe(o *raft.Observation) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch d := o.Data.(type) {
	case raft.LeaderObservation:
		if d.LeaderID == h.self {
			h.since = time.Now()
			clear(h.failing)
		}
	case raft.FailedHeartbeatObservation:
		h.failing[d.PeerID] = true
	case raft.ResumedHeartbeatObservation:
		delete(h.failing, d.PeerID)
	case raft.PeerObservation:
		if d.Removed {
			delete(h.failing, d.Peer.ID)
		}
	}
	return false
}

// tenure returns how long this node has led (valid on a leader).
func (h *peerHealth) tenure() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Since(h.since)
}

func (h *peerHealth) healthy(id raft.ServerID) bool {
	if id == h.self {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.failing[id]
}

// healthGrace is how long a new leader watches its heartbeats before it
// judges its followers' health: long enough for a heartbeat to a dead
// follower to fail, a connection to an unreachable one included (dropped
// after TCP_USER_TIMEOUT, at most a heartbeat timeout: cluster/peer).
func (n *Node) healthGrace() time.Duration { return 2 * n.cfg.HeartbeatTimeout }

// runMember runs a membership step for this node's group on the group's
// leader, this node or another, until it is done, fails, or ctx ends. A
// group that has had no leader to take the step for an election's time
// (adminTimeout) fails it.
func (n *Node) runMember(ctx context.Context, op memberOp, id, raftAddr string) error {
	var last error
	var since time.Time // of the retries in a row
	for {
		var status byte
		var err error
		if n.raft.State() == raft.Shutdown {
			return errors.New("this node's Raft group has stopped (was this node removed?)")
		}
		if n.raft.State() == raft.Leader {
			_, err = n.memberStep(ctx, op, id, raftAddr)
			status = statusOf(err)
		} else if r := n.route(); r.kind == routeForward {
			_, status, err = call(ctx, n, r.addr, memberMethod, memberReq{op, id, raftAddr})
		} else {
			status, err = forward.StatusRetry, fmt.Errorf("%w: no leader known", errNoAnswer)
		}
		if status != forward.StatusRetry {
			return err
		}
		last = err
		if !errors.Is(err, errNoAnswer) {
			since = time.Time{} // a node answered (a leader handing over, say)
		} else if since.IsZero() {
			since = time.Now()
		} else if time.Since(since) > n.adminTimeout() {
			return fmt.Errorf("no leader took the %s step for %s: %w", op, n.adminTimeout(), last)
		}
		pause := time.NewTimer(20 * retryPause)
		select {
		case <-ctx.Done():
			pause.Stop()
			return fmt.Errorf("no leader took the %s step in time: %w", op, last)
		case <-n.life.closing:
			pause.Stop()
			return ErrShuttingDown
		case <-pause.C:
		}
	}
}

// memberStep runs a step on this node: opProgress on any node, the others
// on the leader (else errRouteAgain). Its error's status is statusOf's.
func (n *Node) memberStep(ctx context.Context, op memberOp, id, raftAddr string) (uint64, error) {
	if op == opProgress {
		if id != n.cfg.ID {
			return 0, fmt.Errorf("progress of %q asked of %q", id, n.cfg.ID)
		}
		return n.raft.AppliedIndex(), nil
	}
	if n.raft.State() != raft.Leader {
		return 0, errRouteAgain
	}
	n.membership.busy.Add(1)
	defer n.membership.busy.Add(-1)
	switch op {
	case opJoin:
		return 0, n.joinGroup(ctx, id, raftAddr)
	case opRemove, opRemoveCheck:
		return 0, n.removeGroup(ctx, id, op == opRemoveCheck)
	}
	return 0, fmt.Errorf("%w: unknown membership step %d", codec.ErrMalformed, op)
}

// serve is memberMethod's handler: the step on this node.
func (r memberReq) serve(ctx context.Context, n *Node) (uint64, error) {
	return n.memberStep(ctx, r.op, r.id, r.raftAddr)
}

// configuration returns the group's latest configuration and its index,
// reading again after a timeout while slow allows.
func (n *Node) configuration(ctx context.Context, slow *slowRaft) ([]raft.Server, uint64, error) {
	for {
		f := n.raft.GetConfiguration()
		err := n.waitAdmin(ctx, f)
		if err == nil {
			return f.Configuration().Servers, f.Index(), nil
		}
		if !slow.again(err) {
			return nil, 0, err
		}
	}
}

// slowRaft counts the waits of a step that timed out: Raft may still
// finish what it was given (a busy leader, a slow disk), so the step reads
// the configuration again to see, up to maxSlowRaft times before it gives
// up.
type slowRaft int

// maxSlowRaft is how many timeouts a step waits out.
const maxSlowRaft = 3

// again reports whether err is a timeout the step should wait out.
func (s *slowRaft) again(err error) bool {
	if !errcode.Is(err, errcode.ClusterDown) || *s >= maxSlowRaft {
		return false
	}
	*s++
	return true
}

// configChanged reports whether a change was refused because another
// landed after the index it named (raft's error has no value of its own).
func configChanged(err error) bool {
	return err != nil && strings.Contains(err.Error(), "configuration changed since")
}

// joinGroup makes id a voter of this group, on its leader: a non-voter
// first, a voter once caught up. Idempotent.
func (n *Node) joinGroup(ctx context.Context, id, raftAddr string) error {
	var slow slowRaft
	for {
		servers, index, err := n.configuration(ctx, &slow)
		if err != nil {
			return err
		}
		var member *raft.Server
		for i := range servers {
			s := &servers[i]
			if string(s.ID) == id {
				member = s
			} else if string(s.Address) == raftAddr {
				return &errcode.Error{Code: errcode.MemberConflict, Detail: string(s.ID) + "=" + string(s.Address)}
			}
		}
		if member != nil && string(member.Address) != raftAddr {
			return &errcode.Error{Code: errcode.MemberConflict, Detail: id + "=" + string(member.Address)}
		}
		var f raft.IndexFuture
		switch {
		case member == nil:
			n.log.Info("membership: adding a non-voter", "id", id, "raft", raftAddr)
			f = n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), index, n.adminTimeout())
		case member.Suffrage == raft.Voter:
			return nil
		default:
			start := time.Now()
			if err := n.waitCaughtUp(ctx, id); err != nil {
				return err
			}
			n.log.Info("membership: a non-voter caught up; promoting it", "id", id, "waited", time.Since(start).Round(time.Millisecond))
			f = n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), index, n.adminTimeout())
		}
		if err := n.waitAdmin(ctx, f); err != nil && !configChanged(err) && !slow.again(err) {
			return err
		}
	}
}

// waitCaughtUp waits until non-voter id's applied index trails this
// leader's last index by at most catchUpTrail entries. It fails when the
// node's applied index stops growing for catchUpStall.
func (n *Node) waitCaughtUp(ctx context.Context, id string) error {
	var best uint64
	since := time.Now()
	t := time.NewTicker(catchUpPoll)
	defer t.Stop()
	for {
		if n.raft.State() != raft.Leader {
			return raft.ErrLeadershipLost
		}
		last := n.raft.LastIndex()
		if idx, ok := n.progressOf(ctx, id); ok {
			if idx+catchUpTrail >= last {
				return nil
			}
			if idx > best {
				best, since = idx, time.Now()
			}
		}
		if time.Since(since) > catchUpStall {
			detail := "it never announced its addresses"
			if best > 0 {
				detail = fmt.Sprintf("%d entries behind", last-min(best, last))
			}
			return &errcode.Error{Code: errcode.CatchUpStalled, Num: int64(n.group), Detail: detail}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to catch up: %w", id, ctx.Err())
		case <-n.life.closing:
			return ErrShuttingDown
		case <-t.C:
		}
	}
}

// progressOf asks node id, at the forward address the log holds for it,
// for its applied index of this group.
func (n *Node) progressOf(ctx context.Context, id string) (uint64, bool) {
	e, ok := n.fsm.leader(id)
	if !ok || e.Forward == "" {
		return 0, false
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, status, err := call(cctx, n, peer.MapAddr(n.cfg.DialMap, e.Forward), memberMethod, memberReq{op: opProgress, id: id})
	if err != nil || status != forward.StatusOK {
		n.log.Debug("membership: asking a non-voter's progress failed", "id", id, "err", err)
		return 0, false
	}
	return v, true
}

// removeGroup removes id from this group, on its leader, after the strict
// check; with checkOnly, it only checks. Idempotent.
func (n *Node) removeGroup(ctx context.Context, id string, checkOnly bool) error {
	var slow slowRaft
	for {
		servers, index, err := n.configuration(ctx, &slow)
		if err != nil {
			return err
		}
		var member *raft.Server
		for i := range servers {
			if string(servers[i].ID) == id {
				member = &servers[i]
			}
		}
		if member == nil {
			return nil
		}
		if member.Suffrage == raft.Voter {
			if err := n.strictCheck(ctx, servers, id); err != nil {
				return err
			}
		}
		if checkOnly {
			return nil
		}
		if id == n.cfg.ID {
			n.log.Info("membership: handing leadership over before this node's removal")
			if err := n.waitAdmin(ctx, n.raft.LeadershipTransfer()); err != nil {
				return err
			}
			return errRouteAgain
		}
		n.log.Info("membership: removing a member", "id", id, "suffrage", member.Suffrage.String())
		err = n.waitAdmin(ctx, n.raft.RemoveServer(raft.ServerID(id), index, n.adminTimeout()))
		if err != nil && !configChanged(err) && !slow.again(err) {
			return err
		}
	}
}

// strictCheck refuses the removal of voter id when the voters left would
// not hold a majority of healthy ones. A new leader first watches its
// heartbeats for healthGrace.
func (n *Node) strictCheck(ctx context.Context, servers []raft.Server, id string) error {
	if wait := n.healthGrace() - n.membership.health.tenure(); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-n.life.closing:
			t.Stop()
			return ErrShuttingDown
		case <-t.C:
		}
		if n.raft.State() != raft.Leader {
			return errRouteAgain
		}
	}
	voters, healthy := 0, 0
	for _, s := range servers {
		if s.Suffrage != raft.Voter || string(s.ID) == id {
			continue
		}
		voters++
		if n.membership.health.healthy(s.ID) {
			healthy++
		}
	}
	if voters == 0 || healthy < voters/2+1 {
		n.log.Warn("membership: removal refused", "id", id, "voters_left", voters, "healthy", healthy)
		return &errcode.Error{Code: errcode.RemoveUnsafe, Detail: id, Num: int64(n.group)}
	}
	return nil
}

// groupError names the group of a failed membership step, unless the
// error names it already.
func groupError(op memberOp, g int, err error) error {
	switch e := errcode.Of(err); {
	case e == nil:
	case e.Code == errcode.RemoveUnsafe, e.Code == errcode.CatchUpStalled, e.Code == errcode.MemberConflict,
		e.Code == errcode.ShuttingDown:
		return err
	}
	return &errcode.Error{Code: errcode.GroupAdminFailed, Detail: op.String(), Num: int64(g), Cause: err}
}
