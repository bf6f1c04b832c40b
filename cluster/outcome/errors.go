package outcome

import (
	"errors"
	"time"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// The errors an outcome settles into, shared by the group commit and
// forwarding; cluster's exported errors are these very values (errors.go
// there), so that a forwarded error is == a local one.
var (
	// ErrUncertain matches every error after which the command may have
	// been applied.
	ErrUncertain error = errcode.New(errcode.Uncertain)

	// ErrOutcomeUnknown: the batch was handed to Raft, then leadership
	// changed (or the node shut down) before it was known to commit. It
	// may have been applied. Only ever a reply: an attempt says it with
	// TryUnknown.
	ErrOutcomeUnknown error = errcode.New(errcode.OutcomeUnknown)

	// ErrShuttingDown: the node is closing and did not take the batch; it
	// was not applied.
	ErrShuttingDown error = errcode.New(errcode.ShuttingDown)
)

// ClusterDownError is ErrClusterDown's kind naming the timeout that
// expired: no majority took the command within it, and it was certainly
// not applied.
func ClusterDownError(timeout time.Duration) error {
	return &errcode.Error{Code: errcode.ClusterDown, Num: int64(timeout)}
}

// CommitTimeoutError reports a command handed to Raft (or written to the
// leader) that got no answer within the timeout: it may commit later.
func CommitTimeoutError(timeout time.Duration) error {
	return &errcode.Error{Code: errcode.CommitTimeout, Num: int64(timeout)}
}

// ErrNotApplied is the text of a leader's "route again" answer to a
// forwarded batch that Raft refused before appending it (the status says
// what to do; the text is for logs), and what a TryNotApplied attempt
// reads as (Attempt.Reply).
var ErrNotApplied = errors.New("not applied; route again")

// errWrittenLost is what a TryWritten attempt reads as (Attempt.Reply).
var errWrittenLost = errors.New("written, then the connection broke; send again with the same ID")
