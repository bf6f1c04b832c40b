package cluster

import (
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/cluster/outcome"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// Errors Execute returns. Each is an *errcode.Error: a code with its
// details and no reply text (the RESP server maps codes to Redis texts).
//
// Two classes matter to a client. CLUSTERDOWN means the command was
// certainly not applied: clients such as go-redis retry it on their own,
// and may. UNCERTAIN means the command may have been applied (its log entry
// was handed to Raft, or its request was written to the leader, and no
// answer came): a blind retry could charge twice, so it has a code of its
// own that no client retries by itself.
var (
	// ErrClusterDown matches (errors.Is) every "not applied: no majority"
	// error; the error returned names the timeout. errors.Is(err,
	// ErrClusterDown) always means the command was not applied.
	ErrClusterDown error = errcode.New(errcode.ClusterDown)

	// ErrUncertain matches (errors.Is) every error after which the command
	// may have been applied; the error returned names why.
	ErrUncertain = outcome.ErrUncertain

	// ErrLoading: this node is still replaying its log.
	ErrLoading error = errcode.New(errcode.Loading)

	// ErrOutcomeUnknown: the batch was handed to Raft, then leadership
	// changed (or the node shut down) before it was known to commit. It
	// may have been applied. It matches ErrUncertain. It is only ever a
	// reply (to the client, or a leader's to a follower's forwarded
	// batch); inside the package the attempt kind outcome.TryUnknown says
	// it.
	ErrOutcomeUnknown = outcome.ErrOutcomeUnknown

	// ErrShuttingDown: the node is closing and did not take the batch; it
	// was not applied, so the CLUSTERDOWN class (which clients retry) fits.
	ErrShuttingDown = outcome.ErrShuttingDown
)

// outcome.ClusterDownError is ErrClusterDown naming the timeout that
// expired; outcome.CommitTimeoutError is an UNCERTAIN one naming it.

// lostQuorumError reports a batch handed to Raft whose leader then lost
// its majority, with no new leader within the timeout: the batch may or
// may not have been applied.
func lostQuorumError(timeout time.Duration) error {
	return &errcode.Error{Code: errcode.LostQuorum, Num: int64(timeout)}
}

// errDuplicateBatch is the reply to a re-sent forwarded batch whose first
// copy had already applied: it charged once, and its results are not kept.
// It matches ErrUncertain: the client cannot tell it from one that may
// have applied.
var errDuplicateBatch error = errcode.New(errcode.DuplicateBatch)

// ErrRemoved: this node was removed from its group's configuration
// (RAFT.REMOVE); it serves the group no more.
var ErrRemoved error = errcode.New(errcode.Removed)

// notLeaderError answers an admin command sent to a follower; leader is
// the leader's RESP address, empty when unknown.
func notLeaderError(leader string) error {
	return &errcode.Error{Code: errcode.NotLeader, Detail: leader}
}

// internalError reports a bug: what happened.
func internalError(format string, args ...any) error {
	return &errcode.Error{Code: errcode.Internal, Detail: fmt.Sprintf(format, args...)}
}

// sentinels are the errors without details that a decoded code turns back
// into (codec.Sentinels), so that a forwarded error is the very value (==)
// a local one is.
var sentinels = codec.Sentinels{
	engine.ErrWrongType, engine.ErrClockBackwards, engine.ErrBadRule, engine.ErrOOM,
	engine.ErrKeyLimit, engine.ErrDuplicateKey,
	ErrClusterDown, ErrUncertain, ErrLoading, ErrOutcomeUnknown, ErrShuttingDown, errDuplicateBatch,
	forward.ErrBadReply, forward.ErrConnLost,
}

// adminError gives a raft error from an admin command its code.
func adminError(op string, err error) error {
	if err == nil || errcode.Is(err, errcode.NotLeader) || errcode.Is(err, errcode.ClusterDown) {
		return err
	}
	return &errcode.Error{Code: errcode.AdminFailed, Detail: op, Cause: err}
}
