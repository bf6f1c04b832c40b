package cluster

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// Leadership transfers run on the leader. On a follower they fail with
// NotLeader naming the leader's RESP address instead of being forwarded:
// the operator names the group whose leader should move, and is better
// told where that leader is. Membership changes (RAFT.JOIN, RAFT.REMOVE)
// are forwarded to each group's leader (membership.go); RAFT.SNAPSHOT
// runs on every node for its own state.

// adminTimeout bounds membership changes and transfers, which may take an
// election's time on top of a commit.
func (n *Node) adminTimeout() time.Duration {
	return n.cfg.ClusterTimeout + 2*n.cfg.ElectionTimeout
}

// Status returns this group's RAFT.STATUS fields, in order (Host.Status).
func (n *Node) Status() [][2]string {
	_, leaderID := n.raft.LeaderWithID()
	leaderAddr := ""
	if leaderID != "" {
		if e, ok := n.fsm.leader(string(leaderID)); ok {
			leaderAddr = e.RESP
		}
		if string(leaderID) == n.cfg.ID {
			leaderAddr = n.cfg.RESPAddr
		}
	}
	var members, voters, nonvoters []string
	if servers, err := n.servers(); err == nil {
		for _, s := range servers {
			m := string(s.ID) + "=" + string(s.Address)
			if s.Suffrage != raft.Voter {
				m += "(" + strings.ToLower(s.Suffrage.String()) + ")"
				nonvoters = append(nonvoters, string(s.ID))
			} else {
				voters = append(voters, string(s.ID))
			}
			members = append(members, m)
		}
	}
	slices.Sort(voters)
	slices.Sort(nonvoters)
	return [][2]string{
		{"id", n.cfg.ID},
		{"role", roleName(n.raft.State())},
		{"leader_id", string(leaderID)},
		{"leader_addr", leaderAddr},
		{"term", strconv.FormatUint(n.raft.CurrentTerm(), 10)},
		{"commit_index", strconv.FormatUint(n.raft.CommitIndex(), 10)},
		{"applied_index", strconv.FormatUint(n.appliedIndex(), 10)},
		{"members", strings.Join(members, ",")},
		{"voters", strings.Join(voters, ",")},
		{"nonvoters", strings.Join(nonvoters, ",")},
		{"cluster_version", strconv.FormatUint(uint64(n.fsm.clusterVersion()), 10)},
		{"cluster_version_supported", strconv.FormatUint(uint64(SupportedVersion), 10)},
		{"apply_error", n.applyError()},
		{"removed", boolField(n.membership.removed.Load())},
	}
}

// boolField is a RAFT.STATUS flag: "1" or "0".
func boolField(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// hasServer reports whether servers has id.
func hasServer(servers []raft.Server, id string) bool {
	for _, s := range servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

// noteRemoved looks at the group's latest configuration (what this node's
// log holds, committed or not: the leader replicates the entry that
// removes a member to it before it stops replicating to it) and sets
// removed when it lacks this node, which was a member: a configuration
// since the start had it, or the log's at start did not (removed while it
// was down). A node waiting to be joined has none; one being joined
// catches up through configurations without it, but was never a member.
// Removed stops this node serving the group (Execute, Ready); a later
// configuration that has it again (a new RAFT.JOIN) clears it.
func (n *Node) noteRemoved() {
	f := n.raft.GetConfiguration() // answered at once: Raft's latest configuration
	if f.Error() != nil {
		return
	}
	servers := f.Configuration().Servers
	if hasServer(servers, n.cfg.ID) {
		n.membership.wasMember.Store(true)
		n.membership.lackedAtStart.Store(false)
		if n.membership.removed.Swap(false) {
			n.log.Info("this node is a member of the group again", "group", n.group)
		}
		return
	}
	if len(servers) == 0 || !(n.membership.wasMember.Load() || n.membership.lackedAtStart.Load()) {
		return
	}
	if !n.membership.removed.Swap(true) {
		n.log.Warn("this node was removed from the group's configuration (RAFT.REMOVE): it serves the group no more; wipe its data dir and RAFT.JOIN it to serve again",
			"group", n.group)
	}
}

// appliedIndex is RAFT.STATUS's applied_index: Raft's, which counts every
// entry it handed the state machine, but for a halted state machine the
// last entry it really applied.
func (n *Node) appliedIndex() uint64 {
	if n.fsm.halted() != nil {
		return n.fsm.applied.Load()
	}
	return n.raft.AppliedIndex()
}

// applyError is RAFT.STATUS's apply_error: why this node stopped applying
// the group's log, or "" while it applies it.
func (n *Node) applyError() string {
	if h := n.fsm.halted(); h != nil {
		return h.String()
	}
	return ""
}

func roleName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Candidate:
		return "candidate"
	case raft.Follower:
		return "follower"
	}
	return "shutdown"
}

// servers returns the latest cluster configuration.
func (n *Node) servers() ([]raft.Server, error) {
	f := n.raft.GetConfiguration()
	if err := waitFuture(n.life.closing, f, time.Second); err != nil {
		return nil, err
	}
	return f.Configuration().Servers, nil
}

// leaderOnly returns nil on the leader, else the not-the-leader error.
func (n *Node) leaderOnly() error {
	if n.raft.State() == raft.Leader {
		return nil
	}
	_, id := n.raft.LeaderWithID()
	addr := ""
	if id != "" {
		if e, ok := n.fsm.leader(string(id)); ok {
			addr = e.RESP
		}
	}
	return notLeaderError(addr)
}

// waitAdmin waits for an admin future within ctx and the admin timeout.
func (n *Node) waitAdmin(ctx context.Context, f raft.Future) error {
	timeout := n.adminTimeout()
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	return waitFuture(n.life.closing, f, max(timeout, time.Millisecond))
}

// checkJoin validates RAFT.JOIN's arguments.
func (n *Node) checkJoin(id, raftAddr string) error {
	if id == "" || strings.ContainsAny(id, "=, \t\r\n") {
		return &errcode.Error{Code: errcode.BadNodeID, Detail: id}
	}
	if err := checkHostPort(raftAddr); err != nil {
		return &errcode.Error{Code: errcode.BadRaftAddr, Detail: err.Error()}
	}
	return nil
}

// isMember reports whether id is in this node's latest view of the
// group's configuration.
func (n *Node) isMember(id string) bool {
	servers, err := n.servers()
	if err != nil {
		return false
	}
	for _, s := range servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

// Transfer serves Host.Transfer (RAFT.TRANSFER [id]) for this group.
func (n *Node) Transfer(ctx context.Context, id string) error {
	if err := n.leaderOnly(); err != nil {
		return err
	}
	n.lead.transferring.Add(1) // commands wait meanwhile (route)
	defer n.lead.transferring.Add(-1)
	var f raft.Future
	if id == "" {
		f = n.raft.LeadershipTransfer()
	} else {
		if id == n.cfg.ID {
			return nil // already the leader
		}
		servers, err := n.servers()
		if err != nil {
			return adminError("transfer", err)
		}
		var addr raft.ServerAddress
		for _, s := range servers {
			if string(s.ID) == id && s.Suffrage == raft.Voter {
				addr = s.Address
			}
		}
		if addr == "" {
			return &errcode.Error{Code: errcode.NoSuchVoter, Detail: id}
		}
		f = n.raft.LeadershipTransferToServer(raft.ServerID(id), addr)
	}
	return adminError("transfer", n.waitAdmin(ctx, f))
}

// Snapshot serves Host.Snapshot (RAFT.SNAPSHOT): this node
// snapshots its state now and compacts its log. A snapshot with nothing new
// since the last is not an error.
func (n *Node) Snapshot(ctx context.Context) error {
	f := n.raft.Snapshot()
	timeout := 10 * time.Minute
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	err := waitFuture(n.life.closing, f, max(timeout, time.Millisecond))
	switch {
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
		return nil
	case errors.Is(err, ErrClusterDown):
		return &errcode.Error{Code: errcode.SnapshotTimeout, Num: int64(timeout.Round(time.Millisecond))}
	}
	return adminError("snapshot", err)
}
