package cluster

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// Membership and leadership commands run on the leader. On a follower they
// fail with NotLeader naming the leader's RESP address instead of being
// forwarded: they are rare, operator-driven, and the operator is better
// told where the leader is than left unsure which node acted.
// RAFT.SNAPSHOT is the exception: every node snapshots its own state.

// adminTimeout bounds membership changes and transfers, which may take an
// election's time on top of a commit.
func (n *Node) adminTimeout() time.Duration {
	return n.cfg.ClusterTimeout + 2*n.cfg.ElectionTimeout
}

// Status implements resp.ClusterAdmin: RAFT.STATUS's fields, in order.
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
	var members []string
	if servers, err := n.servers(); err == nil {
		for _, s := range servers {
			m := string(s.ID) + "=" + string(s.Address)
			if s.Suffrage != raft.Voter {
				m += "(" + strings.ToLower(s.Suffrage.String()) + ")"
			}
			members = append(members, m)
		}
	}
	return [][2]string{
		{"id", n.cfg.ID},
		{"role", roleName(n.raft.State())},
		{"leader_id", string(leaderID)},
		{"leader_addr", leaderAddr},
		{"term", strconv.FormatUint(n.raft.CurrentTerm(), 10)},
		{"commit_index", strconv.FormatUint(n.raft.CommitIndex(), 10)},
		{"applied_index", strconv.FormatUint(n.raft.AppliedIndex(), 10)},
		{"members", strings.Join(members, ",")},
	}
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
	if err := waitFuture(n.closing, f, time.Second); err != nil {
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
	return waitFuture(n.closing, f, max(timeout, time.Millisecond))
}

// Join implements resp.ClusterAdmin (RAFT.JOIN id raft_addr): it adds a
// voter. The new node must have been started without bootstrapping.
func (n *Node) Join(ctx context.Context, id, raftAddr string) error {
	if err := n.leaderOnly(); err != nil {
		return err
	}
	if id == "" || strings.ContainsAny(id, "=, \t\r\n") {
		return &errcode.Error{Code: errcode.BadNodeID, Detail: id}
	}
	if n.cfg.Transport == nil {
		if err := checkHostPort(raftAddr); err != nil {
			return &errcode.Error{Code: errcode.BadRaftAddr, Detail: err.Error()}
		}
	}
	f := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.adminTimeout())
	return adminError("join", n.waitAdmin(ctx, f))
}

// Remove implements resp.ClusterAdmin (RAFT.REMOVE id).
func (n *Node) Remove(ctx context.Context, id string) error {
	if err := n.leaderOnly(); err != nil {
		return err
	}
	servers, err := n.servers()
	if err != nil {
		return adminError("remove", err)
	}
	found := false
	for _, s := range servers {
		found = found || string(s.ID) == id
	}
	if !found {
		return &errcode.Error{Code: errcode.NoSuchNode, Detail: id}
	}
	f := n.raft.RemoveServer(raft.ServerID(id), 0, n.adminTimeout())
	return adminError("remove", n.waitAdmin(ctx, f))
}

// Transfer implements resp.ClusterAdmin (RAFT.TRANSFER [id]).
func (n *Node) Transfer(ctx context.Context, id string) error {
	if err := n.leaderOnly(); err != nil {
		return err
	}
	n.transferring.Add(1) // commands wait meanwhile (route)
	defer n.transferring.Add(-1)
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

// Snapshot implements resp.ClusterAdmin (RAFT.SNAPSHOT): this node
// snapshots its state now and compacts its log. A snapshot with nothing new
// since the last is not an error.
func (n *Node) Snapshot(ctx context.Context) error {
	f := n.raft.Snapshot()
	timeout := 10 * time.Minute
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	err := waitFuture(n.closing, f, max(timeout, time.Millisecond))
	switch {
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
		return nil
	case errors.Is(err, ErrClusterDown):
		return &errcode.Error{Code: errcode.SnapshotTimeout, Num: int64(timeout.Round(time.Millisecond))}
	}
	return adminError("snapshot", err)
}
