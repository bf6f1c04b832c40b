package cluster

import (
	"errors"
	"fmt"
	"time"
)

// Errors Execute returns. Their texts are Redis error replies without the
// leading '-': the server writes them as they are.
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
	ErrClusterDown = errors.New("CLUSTERDOWN no quorum: the cluster could not commit in time")

	// ErrUncertain matches (errors.Is) every error after which the command
	// may have been applied; the error returned names why.
	ErrUncertain = errors.New("UNCERTAIN the command may have been applied")

	// ErrLoading: this node is still replaying its log.
	ErrLoading = errors.New("LOADING sluice is loading the dataset in memory")

	// ErrOutcomeUnknown: the batch was handed to Raft, then leadership
	// changed (or the node shut down) before it was known to commit. It
	// may have been applied. It matches ErrUncertain.
	ErrOutcomeUnknown error = uncertainError{"leadership changed while committing; the command may have been applied"}

	// ErrShuttingDown: the node is closing and did not take the batch; it
	// was not applied, so the CLUSTERDOWN class (which clients retry) fits.
	ErrShuttingDown = errors.New("CLUSTERDOWN this node is shutting down")
)

// clusterDownError is ErrClusterDown with the timeout that expired: no
// majority took the command within it, and it was certainly not applied.
type clusterDownError struct{ timeout time.Duration }

func (e clusterDownError) Error() string {
	return fmt.Sprintf("CLUSTERDOWN no quorum: the cluster could not commit within %v", e.timeout)
}

func (e clusterDownError) Is(target error) bool { return target == ErrClusterDown }

// uncertainError is ErrUncertain with its reason.
type uncertainError struct{ reason string }

func (e uncertainError) Error() string { return "UNCERTAIN " + e.reason }

func (e uncertainError) Is(target error) bool { return target == ErrUncertain }

// commitTimeoutError reports a command handed to Raft (or written to the
// leader) that got no answer within the timeout: it may commit later.
func commitTimeoutError(timeout time.Duration) error {
	return uncertainError{fmt.Sprintf("no answer from the cluster within %v after the command was submitted; it may have been applied", timeout)}
}

// lostQuorumError reports a batch handed to Raft whose leader then lost
// its majority, with no new leader within the timeout: the batch may or
// may not have been applied.
func lostQuorumError(timeout time.Duration) error {
	return uncertainError{fmt.Sprintf("leadership was lost while committing and no majority answered within %v; the command may have been applied", timeout)}
}

// errDuplicateBatch is the reply to a re-sent forwarded batch whose first
// copy had already applied: it charged once, and its results are not kept.
var errDuplicateBatch error = uncertainError{"the command was re-sent after a broken connection and had already been applied; its result is lost"}

// notLeaderError answers an admin command sent to a follower.
type notLeaderError struct{ leader string }

func (e notLeaderError) Error() string {
	if e.leader == "" {
		return "ERR not the leader; the leader is unknown"
	}
	return "ERR not the leader; leader is " + e.leader
}

// errRetry is internal: the batch was certainly not applied (raft refused
// it before appending it: not the leader, a leadership transfer, a full
// queue), so Execute may route it again while its deadline allows.
var errRetry = errors.New("not applied; route again")

// errResend is internal: a forwarded batch was written to the leader and
// its connection broke before the answer came. It may have been applied;
// Execute sends it again, with the same batch ID (which the FSM applies at
// most once), while its deadline allows, and answers UNCERTAIN if none
// of its tries got an answer.
var errResend = errors.New("written, then the connection broke; send again with the same ID")

// adminError turns a raft error from an admin command into a reply text.
func adminError(op string, err error) error {
	if err == nil {
		return nil
	}
	var nl notLeaderError
	var cd clusterDownError
	if errors.As(err, &nl) || errors.As(err, &cd) {
		return err
	}
	return fmt.Errorf("ERR %s failed: %w", op, err)
}
