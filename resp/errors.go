package resp

import (
	"errors"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// The one table of error reply texts (without the leading '-'): the engine
// and cluster return coded errors (internal/errcode) and know no reply
// text; fixedTexts and codeText render each code, with its details,
// exactly as clients see it. A new error gets a code in errcode and a text
// here (and a line in docs/design.md's "Error codes"); TestErrorTexts
// fails for a code without one.

// fixedTexts are the texts of the codes whose replies name no detail.
var fixedTexts = [errcode.NumCodes]string{
	errcode.WrongType:      "WRONGTYPE Operation against a key holding the wrong kind of limiter",
	errcode.OOM:            "OOM command not allowed when used memory > 'maxmemory'.",
	errcode.ShuttingDown:   "CLUSTERDOWN this node is shutting down",
	errcode.Loading:        "LOADING sluice is loading the dataset in memory",
	errcode.Uncertain:      "UNCERTAIN the command may have been applied",
	errcode.OutcomeUnknown: "UNCERTAIN leadership changed while committing; the command may have been applied",
	errcode.DuplicateBatch: "UNCERTAIN the command was re-sent after a broken connection and had already been applied; its result is lost",
	errcode.BadReply:       "UNCERTAIN the leader's reply did not decode; the command may have been applied",
	errcode.ConnLost:       "UNCERTAIN the connection to the leader broke after the command was sent; it may have been applied",
}

// codeText renders e's reply text; "" for a code it does not know.
func codeText(e *errcode.Error) string {
	if e.Code < errcode.NumCodes && fixedTexts[e.Code] != "" {
		return fixedTexts[e.Code]
	}
	switch e.Code {
	case errcode.Internal:
		return "ERR internal error: " + e.Detail
	case errcode.Other:
		return "ERR " + e.Detail
	case errcode.BadRule:
		return withDetail("ERR invalid limiter parameters", ": ", e.Detail, "")
	case errcode.ClockBackwards:
		return withDetail("ERR the clock never goes backwards: freeze time is before the current time", " (", e.Detail, ")")
	case errcode.KeyLimit:
		if e.Num == 0 {
			return "OOM command not allowed: the key limit is reached"
		}
		return "OOM command not allowed: the key limit is reached (max-keys " + strconv.FormatInt(e.Num, 10) + ")"
	case errcode.DuplicateKey:
		if e.Detail == "" {
			return "ERR duplicate key in RL.ALL"
		}
		return "ERR duplicate key in RL.ALL: " + strconv.Quote(e.Detail)
	case errcode.ClusterDown:
		if e.Num == 0 {
			return "CLUSTERDOWN no quorum: the cluster could not commit in time"
		}
		return "CLUSTERDOWN no quorum: the cluster could not commit within " + time.Duration(e.Num).String()
	case errcode.CommitTimeout:
		return "UNCERTAIN no answer from the cluster within " + time.Duration(e.Num).String() + " after the command was submitted; it may have been applied"
	case errcode.LostQuorum:
		return "UNCERTAIN leadership was lost while committing and no majority answered within " + time.Duration(e.Num).String() + "; the command may have been applied"
	case errcode.NotLeader:
		if e.Detail == "" {
			return "ERR not the leader; the leader is unknown"
		}
		return "ERR not the leader; leader is " + e.Detail
	case errcode.BadNodeID:
		return "ERR invalid node id " + strconv.Quote(e.Detail)
	case errcode.BadRaftAddr:
		return "ERR invalid raft address: " + e.Detail
	case errcode.NoSuchNode:
		return "ERR no such node " + strconv.Quote(e.Detail)
	case errcode.NoSuchVoter:
		return "ERR no such voter " + strconv.Quote(e.Detail)
	case errcode.SnapshotTimeout:
		return "ERR snapshot did not finish within " + time.Duration(e.Num).String()
	case errcode.LogWriteFailed:
		return "MISCONF the Raft log cannot be written, so commands that need it are refused (not applied) until it can: " + e.Detail
	case errcode.AdminFailed:
		// The cause is Raft's error, or a coded one (the node shutting
		// down) that reads as its reply.
		cause := "unknown error"
		if c := errcode.Of(e.Cause); c != nil {
			cause = codeText(c)
		} else if e.Cause != nil {
			cause = e.Cause.Error()
		}
		return "ERR " + e.Detail + " failed: " + cause
	}
	return ""
}

// withDetail appends detail between open and close to text, when there is one.
func withDetail(text, open, detail, close string) string {
	if detail == "" {
		return text
	}
	return text + open + detail + close
}

// errSyntax is resp's own error; its text is the reply.
var errSyntax = errors.New("ERR syntax error")

// errorText renders err as an error reply's text: a coded error through
// codeText; resp's own errors (their texts are replies) as they are;
// anything else as ERR and its text.
func errorText(err error) string {
	if e := errcode.Of(err); e != nil {
		if text := codeText(e); text != "" {
			return text
		}
		return "ERR " + e.Error()
	}
	var ae *ArgError
	if err == errSyntax || errors.As(err, &ae) {
		return err.Error()
	}
	return "ERR " + err.Error()
}
