package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// GroupSnapshot is one Raft group's state as RAFT.BACKUP hands it out: a
// snapshot stream (persistence's format) taken at applied index Index.
type GroupSnapshot struct {
	Index       uint64
	Term        uint64
	LockStripes int // the engine's lock stripes, which engine.Digest depends on
	Data        []byte
}

// maxBackupBytes bounds a group's snapshot RAFT.BACKUP sends (a RESP bulk
// string holds at most 512 MB).
const maxBackupBytes = 512 << 20

// Backup returns a snapshot of the node's group that is linearizable: it
// holds every command acknowledged before Backup was called, and is the
// state at one applied index. Only the leader answers (a follower returns
// the not-the-leader error naming the leader's RESP address): a barrier
// through the log first makes every entry committed before the call apply
// here, then Raft takes a snapshot on the FSM goroutine (so at one index),
// which is read back from the snapshot store. The snapshot is also kept
// like any other (it compacts the log as RAFT.SNAPSHOT does).
func (n *Node) Backup(ctx context.Context) (GroupSnapshot, error) {
	if err := n.leaderOnly(); err != nil {
		return GroupSnapshot{}, err
	}
	timeout := 10 * time.Minute
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	if err := waitFuture(n.life.closing, n.raft.Barrier(n.cfg.ClusterTimeout), n.cfg.ClusterTimeout); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return GroupSnapshot{}, n.leaderOnly()
		}
		return GroupSnapshot{}, adminError("backup", err)
	}
	f := n.raft.Snapshot()
	if err := waitFuture(n.life.closing, f, timeout); err != nil {
		if errors.Is(err, ErrClusterDown) {
			return GroupSnapshot{}, &errcode.Error{Code: errcode.SnapshotTimeout, Num: int64(timeout.Round(time.Millisecond))}
		}
		return GroupSnapshot{}, adminError("backup", err)
	}
	meta, rc, err := f.Open()
	if err != nil {
		return GroupSnapshot{}, adminError("backup", fmt.Errorf("open the snapshot: %w", err))
	}
	defer rc.Close()
	if meta.Size > maxBackupBytes {
		return GroupSnapshot{}, adminError("backup", fmt.Errorf("the snapshot has %d bytes, more than the %d a reply may carry", meta.Size, maxBackupBytes))
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxBackupBytes+1))
	if err != nil {
		return GroupSnapshot{}, adminError("backup", fmt.Errorf("read the snapshot: %w", err))
	}
	return GroupSnapshot{Index: meta.Index, Term: meta.Term, LockStripes: n.eng.NumStripes(), Data: data}, nil
}

// Backup implements resp's BackupAdmin: group g's snapshot, on its leader.
func (h *Host) Backup(ctx context.Context, g int) (index, term uint64, lockStripes int, data []byte, err error) {
	if g < 0 || g >= len(h.nodes) {
		return 0, 0, 0, nil, fmt.Errorf("cluster: no group %d", g)
	}
	s, err := h.nodes[g].Backup(ctx)
	return s.Index, s.Term, s.LockStripes, s.Data, err
}
