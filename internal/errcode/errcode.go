// Package errcode names every error a sluice command can end in, as a
// small code with the details its reply needs: the engine and cluster
// return *Error values and know no reply text, the forwarding wire carries
// their codes, and the RESP server alone renders each code as its Redis
// reply (resp/errors.go). The catalogue (catalogue.go) is the one table of
// the codes: name, class, reply format and docs/design.md's columns. A new
// error is a code here and a row there; docs/design.md "A new error" lists
// the steps and the tests that fail until each is done.
//
// It imports nothing of ours, so that every package may use it.
package errcode

import (
	"errors"
	"strconv"
	"time"
)

// Code identifies an error kind. Codes travel on the forwarding wire as one
// byte: never renumber one, only append.
type Code uint8

// The codes. Each says what the client may assume; its row in the
// catalogue (catalogue.go) holds its class and reply text.
const (
	// Internal: a bug or an error from below that has no code of its own;
	// Detail says what failed.
	Internal Code = iota
	// WrongType: the key holds another kind of limiter. Not applied.
	WrongType
	// BadRule: a rule, cost or op the engine cannot hold; Detail names it.
	// Not applied.
	BadRule
	// ClockBackwards: DEBUG CLOCK FREEZE at an instant before the clock's
	// time; Detail gives both instants. Not applied.
	ClockBackwards
	// OOM: the call would create a key beyond the memory limit. Not applied.
	OOM
	// KeyLimit: the call would create a key beyond max-keys (Num, when
	// not zero). Not applied.
	KeyLimit
	// DuplicateKey: an RL.ALL names a key twice (Detail). Not applied.
	DuplicateKey
	// ClusterDown: no majority took the command within the cluster timeout
	// (Num, in ns; zero when not named). Certainly not applied: retry.
	ClusterDown
	// ShuttingDown: the node is closing and did not take the command.
	// Certainly not applied: retry elsewhere.
	ShuttingDown
	// Loading: the node is still replaying its log. Not applied: retry.
	Loading
	// Uncertain: the command may have been applied; Detail says why (when
	// empty, no reason is named). Never retry blindly.
	Uncertain
	// CommitTimeout: handed to Raft (or written to the leader), and no
	// answer within Num ns. May have been applied.
	CommitTimeout
	// LostQuorum: handed to Raft, then the leader lost its majority and no
	// majority answered within Num ns. May have been applied.
	LostQuorum
	// OutcomeUnknown: handed to Raft, then leadership changed before it was
	// known to commit. May have been applied.
	OutcomeUnknown
	// DuplicateBatch: a re-sent forwarded batch whose first copy had
	// applied: charged once, its result lost. The client sees it as one
	// that may have been applied (it was).
	DuplicateBatch
	// NotLeader: an admin command sent to a follower; Detail is the
	// leader's RESP address, empty when unknown. Not applied.
	NotLeader
	// BadNodeID: an admin command named an invalid node id (Detail).
	BadNodeID
	// BadRaftAddr: RAFT.JOIN's address is invalid; Detail says why.
	BadRaftAddr
	// NoSuchNode: RAFT.REMOVE named no server of the configuration (Detail).
	NoSuchNode
	// NoSuchVoter: RAFT.TRANSFER named no voter (Detail).
	NoSuchVoter
	// SnapshotTimeout: RAFT.SNAPSHOT did not finish within Num ns.
	SnapshotTimeout
	// AdminFailed: an admin command (Detail names it) failed in Raft; the
	// cause is wrapped.
	AdminFailed
	// BadReply: the leader's reply to a forwarded command did not decode.
	// May have been applied.
	BadReply
	// ConnLost: the connection to the leader broke after a forwarded
	// command was written, and no re-send was answered. May have been
	// applied.
	ConnLost
	// Other: an error without a code, as it crosses the forwarding wire;
	// Detail is its text. Rendered as the RESP server renders any error
	// without a code.
	Other
	// GroupAdminFailed: RAFT.JOIN or RAFT.REMOVE (Detail) did not finish
	// in group Num; the cause is wrapped. Sending the command again
	// resumes it.
	GroupAdminFailed
	// RemoveUnsafe: RAFT.REMOVE of Detail would leave group Num without a
	// majority of healthy voters (etcd's strict reconfiguration check).
	// Not applied.
	RemoveUnsafe
	// MemberConflict: RAFT.JOIN's id or raft address is taken by another
	// member (Detail: that member as id=address). Not applied.
	MemberConflict
	// CatchUpStalled: a joining node stopped catching up with group Num's
	// log; Detail says how far behind it is. It stays a non-voter.
	CatchUpStalled
	// ClusterVersion: the command needs a cluster version (Num) above the
	// one the cluster runs (Detail, a number): not every node supports it
	// yet. Not applied.
	ClusterVersion
	// ApplyHalted: this node stopped applying its group's log at an entry
	// it cannot apply (Detail says which and why); it serves the group no
	// more until a binary that can apply it runs here. Not applied.
	ApplyHalted

	// WrongTypeValue: a string command on a limiter key (Redis's
	// WRONGTYPE text). Not applied.
	WrongTypeValue
	// NotInteger: a value or argument is not a 64-bit integer (Redis's
	// "value is not an integer or out of range"). Not applied.
	NotInteger
	// IncrOverflow: INCRBY/DECRBY would overflow a 64-bit integer. Not
	// applied.
	IncrOverflow
	// BadExpire: an expiry out of range (Redis's "invalid expire time in
	// '<command>' command"). Not applied.
	BadExpire
	// ValueTooLong: a string value longer than max-value-len (Num). Not
	// applied.
	ValueTooLong
	// LogWriteFailed: the node's Raft log cannot be written (a full disk,
	// an I/O error): Detail says what failed and why. Certainly not
	// applied (rendered MISCONF, Redis's code for a server that cannot
	// persist).
	LogWriteFailed
	// Removed: this node was removed from the cluster (RAFT.REMOVE): it
	// serves no more as a member. Not applied.
	Removed
	// HashNotInteger: HINCRBY on a field whose value is not a 64-bit
	// integer (Redis's "hash value is not an integer"). Not applied.
	HashNotInteger
	// HashNotFloat: HINCRBYFLOAT on a field whose value is not a float.
	// Not applied.
	HashNotFloat
	// NaNOrInfinity: INCRBYFLOAT or HINCRBYFLOAT would produce NaN or an infinity. Not
	// applied.
	NaNOrInfinity
	// ScoreNaN: a sorted set's score would become NaN (ZADD INCR, ZINCRBY
	// adding -inf to inf). Not applied.
	ScoreNaN
	// NoSuchKey: LSET, RENAME or RENAMENX on a key that does not exist
	// (Redis's "no such key"). Not applied.
	NoSuchKey
	// IndexOutOfRange: LSET at an index beyond the list. Not applied.
	IndexOutOfRange
	// CollectionTooLarge: a hash, sorted set or list would hold more than
	// max-collection-len (Num) elements. Not applied.
	CollectionTooLarge
	// NotFloat: a float argument that is not a number (Redis's "value is
	// not a valid float"). Not applied.
	NotFloat
	// NoScript: EVALSHA of a script the cache does not hold (Redis's
	// NOSCRIPT). Not applied.
	NoScript
	// ScriptCacheFull: a new script beyond --script-cache-max (Num
	// scripts, Detail bytes). Not applied.
	ScriptCacheFull
	// NoScripting: a script op on an engine without a script runner.
	// Not applied.
	NoScripting

	// NumCodes is the number of codes; every code is below it.
	NumCodes
)

// String returns the code's name (not a reply text).
func (c Code) String() string {
	if c < NumCodes {
		return catalogue[c].Name
	}
	return "code " + strconv.Itoa(int(c))
}

// Class is what a client may assume about a command that failed.
type Class uint8

// The classes.
const (
	// NotApplied: the command certainly changed nothing.
	NotApplied Class = iota
	// MayHaveApplied: the command may have been applied (UNCERTAIN).
	MayHaveApplied
	// Unavailable: the node or the cluster could not take the command
	// (no quorum in time, shutting down, loading): certainly not applied,
	// and it may be sent again, later or to another node. It is about a
	// batch's fate, not one operation's outcome.
	Unavailable
)

// Class returns what a client may assume after c.
func (c Code) Class() Class {
	if c < NumCodes {
		return catalogue[c].Class
	}
	return NotApplied
}

// Error is an error with a code. Its Error text names the code and
// details for logs; the reply a client sees is its code's catalogue
// reply, rendered by the RESP server.
type Error struct {
	Code   Code
	Detail string // what the code leaves open: a key, a reason, an address
	Num    int64  // a number the reply names: max-keys, a timeout in ns
	Cause  error  // the error below, if any (not sent between nodes)
}

// New returns an error with code c and no details.
func New(c Code) *Error { return &Error{Code: c} }

// Error describes e for logs.
func (e *Error) Error() string {
	s := e.Code.String()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	switch {
	case e.Num == 0:
	case e.Code == ClusterDown || e.Code == CommitTimeout || e.Code == LostQuorum || e.Code == SnapshotTimeout:
		s += " (" + time.Duration(e.Num).String() + ")"
	default:
		s += " (" + strconv.FormatInt(e.Num, 10) + ")"
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// Is matches a target *Error of the same code, whatever the details: the
// package-level sentinels (engine.ErrWrongType, cluster.ErrClusterDown...)
// match every error of their code. A target of code Uncertain matches
// every code of the may-have-applied class too.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Code == e.Code || t.Code == Uncertain && e.Code.Class() == MayHaveApplied
}

// Of returns err's *Error (through wrapping), or nil.
func Of(err error) *Error {
	if err == nil {
		return nil // before e, whose address escapes: no allocation for nil
	}
	if e, ok := err.(*Error); ok {
		return e
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// Is reports whether err carries code c.
func Is(err error, c Code) bool {
	e := Of(err)
	return e != nil && e.Code == c
}
