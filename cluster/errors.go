package cluster

import (
	"errors"
	"fmt"
	"time"
)

// Errors Execute returns. Their texts are Redis error replies without the
// leading '-': the server writes them as they are.
var (
	// ErrClusterDown matches (errors.Is) every "could not commit in time"
	// error; the error returned names the timeout.
	ErrClusterDown = errors.New("CLUSTERDOWN no quorum: the cluster could not commit in time")

	// ErrLoading: this node is still replaying its log.
	ErrLoading = errors.New("LOADING sluice is loading the dataset in memory")

	// ErrOutcomeUnknown: the batch was handed to Raft, then leadership
	// changed (or the node shut down) before it was known to commit. It
	// may have been applied, so it must not be retried blindly: the error
	// class is ERR, which clients do not retry on their own.
	ErrOutcomeUnknown = errors.New("ERR outcome unknown: leadership changed while committing; the operation may have been applied")

	// ErrShuttingDown: the node is closing and did not take the batch; it
	// was not applied, so the CLUSTERDOWN class (which clients retry) fits.
	ErrShuttingDown = errors.New("CLUSTERDOWN this node is shutting down")
)

// clusterDownError is ErrClusterDown with the timeout that expired.
type clusterDownError struct{ timeout time.Duration }

func (e clusterDownError) Error() string {
	return fmt.Sprintf("CLUSTERDOWN no quorum: the cluster could not commit within %v", e.timeout)
}

func (e clusterDownError) Is(target error) bool { return target == ErrClusterDown }

// lostQuorumError reports a batch handed to Raft whose leader then lost
// its majority, with no new leader within the timeout: the cluster is down,
// and the batch may or may not have been applied.
type lostQuorumError struct{ timeout time.Duration }

func (e lostQuorumError) Error() string {
	return fmt.Sprintf("CLUSTERDOWN no quorum: leadership was lost while committing and no majority answered within %v; the operation may have been applied", e.timeout)
}

func (e lostQuorumError) Is(target error) bool {
	return target == ErrClusterDown || target == ErrOutcomeUnknown
}

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
