package resp

import (
	"errors"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// errorTexts is the one table of error reply texts (without the leading
// '-'): the engine and cluster return coded errors (internal/errcode) and
// know no reply text; this renders each code, with its details, exactly as
// clients see it. A new error gets a code in errcode and a row here (and a
// line in docs/design.md's "Error codes").
var errorTexts = [errcode.NumCodes]func(e *errcode.Error) string{
	errcode.Internal: func(e *errcode.Error) string { return "ERR internal error: " + e.Detail },
	errcode.WrongType: func(*errcode.Error) string {
		return "WRONGTYPE Operation against a key holding the wrong kind of limiter"
	},
	errcode.BadRule: func(e *errcode.Error) string {
		return withDetail("ERR invalid limiter parameters", ": ", e.Detail, "")
	},
	errcode.ClockBackwards: func(e *errcode.Error) string {
		return withDetail("ERR the clock never goes backwards: freeze time is before the current time", " (", e.Detail, ")")
	},
	errcode.OOM: func(*errcode.Error) string { return "OOM command not allowed when used memory > 'maxmemory'." },
	errcode.KeyLimit: func(e *errcode.Error) string {
		const text = "OOM command not allowed: the key limit is reached"
		if e.Num == 0 {
			return text
		}
		return text + " (max-keys " + strconv.FormatInt(e.Num, 10) + ")"
	},
	errcode.DuplicateKey: func(e *errcode.Error) string {
		const text = "ERR duplicate key in RL.ALL"
		if e.Detail == "" {
			return text
		}
		return text + ": " + strconv.Quote(e.Detail)
	},
	errcode.ClusterDown: func(e *errcode.Error) string {
		if e.Num == 0 {
			return "CLUSTERDOWN no quorum: the cluster could not commit in time"
		}
		return "CLUSTERDOWN no quorum: the cluster could not commit within " + time.Duration(e.Num).String()
	},
	errcode.ShuttingDown: func(*errcode.Error) string { return "CLUSTERDOWN this node is shutting down" },
	errcode.Loading:      func(*errcode.Error) string { return "LOADING sluice is loading the dataset in memory" },
	errcode.Uncertain: func(e *errcode.Error) string {
		if e.Detail == "" {
			return "UNCERTAIN the command may have been applied"
		}
		return "UNCERTAIN " + e.Detail
	},
	errcode.CommitTimeout: func(e *errcode.Error) string {
		return "UNCERTAIN no answer from the cluster within " + time.Duration(e.Num).String() +
			" after the command was submitted; it may have been applied"
	},
	errcode.LostQuorum: func(e *errcode.Error) string {
		return "UNCERTAIN leadership was lost while committing and no majority answered within " +
			time.Duration(e.Num).String() + "; the command may have been applied"
	},
	errcode.OutcomeUnknown: func(*errcode.Error) string {
		return "UNCERTAIN leadership changed while committing; the command may have been applied"
	},
	errcode.DuplicateBatch: func(*errcode.Error) string {
		return "UNCERTAIN the command was re-sent after a broken connection and had already been applied; its result is lost"
	},
	errcode.NotLeader: func(e *errcode.Error) string {
		if e.Detail == "" {
			return "ERR not the leader; the leader is unknown"
		}
		return "ERR not the leader; leader is " + e.Detail
	},
	errcode.BadNodeID:   func(e *errcode.Error) string { return "ERR invalid node id " + strconv.Quote(e.Detail) },
	errcode.BadRaftAddr: func(e *errcode.Error) string { return "ERR invalid raft address: " + e.Detail },
	errcode.NoSuchNode:  func(e *errcode.Error) string { return "ERR no such node " + strconv.Quote(e.Detail) },
	errcode.NoSuchVoter: func(e *errcode.Error) string { return "ERR no such voter " + strconv.Quote(e.Detail) },
	errcode.SnapshotTimeout: func(e *errcode.Error) string {
		return "ERR snapshot did not finish within " + time.Duration(e.Num).String()
	},
	errcode.BadReply: func(*errcode.Error) string {
		return "UNCERTAIN the leader's reply did not decode; the command may have been applied"
	},
	errcode.ConnLost: func(*errcode.Error) string {
		return "UNCERTAIN the connection to the leader broke after the command was sent; it may have been applied"
	},
	errcode.Other: func(e *errcode.Error) string { return "ERR " + e.Detail },
	errcode.AdminFailed: func(e *errcode.Error) string {
		cause := "unknown error"
		if e.Cause != nil {
			cause = e.Cause.Error()
		}
		return "ERR " + e.Detail + " failed: " + cause
	},
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
// errorTexts; resp's own errors (their texts are replies) as they are;
// anything else as ERR and its text.
func errorText(err error) string {
	if e := errcode.Of(err); e != nil {
		if e.Code < errcode.NumCodes && errorTexts[e.Code] != nil {
			return errorTexts[e.Code](e)
		}
		return "ERR " + e.Error()
	}
	var ae *ArgError
	if err == errSyntax || errors.As(err, &ae) {
		return err.Error()
	}
	return "ERR " + err.Error()
}
