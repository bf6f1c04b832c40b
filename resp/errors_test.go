package resp

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// TestErrorTexts pins every code's reply text, byte for byte: they are the
// texts sluice answered before errors had codes, and clients match them.
func TestErrorTexts(t *testing.T) {
	e := func(c errcode.Code, detail string, num int64) error {
		return &errcode.Error{Code: c, Detail: detail, Num: num}
	}
	tests := []struct {
		err  error
		want string
	}{
		{e(errcode.Internal, "3 results for 2 operations", 0), "ERR internal error: 3 results for 2 operations"},
		{e(errcode.WrongType, "", 0), "WRONGTYPE Operation against a key holding the wrong kind of limiter"},
		{e(errcode.BadRule, "", 0), "ERR invalid limiter parameters"},
		{e(errcode.BadRule, "negative cost -1", 0), "ERR invalid limiter parameters: negative cost -1"},
		{e(errcode.ClockBackwards, "freeze at 1 ns, clock at 2 ns", 0),
			"ERR the clock never goes backwards: freeze time is before the current time (freeze at 1 ns, clock at 2 ns)"},
		{e(errcode.OOM, "", 0), "OOM command not allowed when used memory > 'maxmemory'."},
		{e(errcode.KeyLimit, "", 10), "OOM command not allowed: the key limit is reached (max-keys 10)"},
		{e(errcode.KeyLimit, "", 0), "OOM command not allowed: the key limit is reached"},
		{e(errcode.DuplicateKey, "a\"b\x01", 0), `ERR duplicate key 'a"b\x01' in RL.ALL`},
		{e(errcode.ClusterDown, "", 0), "CLUSTERDOWN no quorum: the cluster could not commit in time"},
		{e(errcode.ClusterDown, "", int64(2*time.Second)), "CLUSTERDOWN no quorum: the cluster could not commit within 2s"},
		{e(errcode.ShuttingDown, "", 0), "CLUSTERDOWN this node is shutting down"},
		{e(errcode.Loading, "", 0), "LOADING sluice is loading the dataset in memory"},
		{e(errcode.Uncertain, "", 0), "UNCERTAIN the command may have been applied"},
		{e(errcode.Uncertain, "applied in some shards only", 0), "UNCERTAIN the command may have been applied (applied in some shards only)"},
		{e(errcode.CommitTimeout, "", int64(time.Second)),
			"UNCERTAIN no answer from the cluster within 1s after the command was submitted; it may have been applied"},
		{e(errcode.LostQuorum, "", int64(1500*time.Millisecond)),
			"UNCERTAIN leadership was lost while committing and no majority answered within 1.5s; the command may have been applied"},
		{e(errcode.OutcomeUnknown, "", 0), "UNCERTAIN leadership changed while committing; the command may have been applied"},
		{e(errcode.DuplicateBatch, "", 0),
			"UNCERTAIN the command was re-sent after a broken connection and had already been applied; its result is lost"},
		{e(errcode.BadReply, "", 0), "UNCERTAIN the leader's reply did not decode; the command may have been applied"},
		{e(errcode.ConnLost, "", 0),
			"UNCERTAIN the connection to the leader broke after the command was sent; it may have been applied"},
		{e(errcode.NotLeader, "", 0), "ERR not the leader; the leader is unknown"},
		{e(errcode.NotLeader, "10.0.0.1:6379", 0), "ERR not the leader; leader is 10.0.0.1:6379"},
		{e(errcode.BadNodeID, "a b", 0), `ERR invalid node id "a b"`},
		{e(errcode.BadRaftAddr, "missing port in address", 0), "ERR invalid raft address: missing port in address"},
		{e(errcode.NoSuchNode, "n9", 0), `ERR no such node "n9"`},
		{e(errcode.NoSuchVoter, "n9", 0), `ERR no such voter "n9"`},
		{e(errcode.SnapshotTimeout, "", int64(10*time.Second)), "ERR snapshot did not finish within 10s"},
		{&errcode.Error{Code: errcode.AdminFailed, Detail: "join", Cause: errors.New("configuration changed since 3")},
			"ERR join failed: configuration changed since 3"},
		{&errcode.Error{Code: errcode.AdminFailed, Detail: "transfer", Cause: errcode.New(errcode.ShuttingDown)},
			"ERR transfer failed: CLUSTERDOWN this node is shutting down"},
		{e(errcode.Other, "cluster: forward: context canceled", 0), "ERR cluster: forward: context canceled"},
		{&errcode.Error{Code: errcode.GroupAdminFailed, Detail: "join", Num: 2, Cause: e(errcode.Other, "leadership lost", 0)},
			"ERR join failed in group 2: leadership lost"},
		{&errcode.Error{Code: errcode.GroupAdminFailed, Detail: "remove", Num: 0, Cause: e(errcode.ClusterDown, "", int64(2*time.Second))},
			"ERR remove failed in group 0: CLUSTERDOWN no quorum: the cluster could not commit within 2s"},
		{e(errcode.RemoveUnsafe, "n2", 1), `ERR refused: removing "n2" would leave group 1 without a majority of healthy voters`},
		{e(errcode.MemberConflict, "n3=127.0.0.1:7003", 0),
			"ERR conflicts with member n3=127.0.0.1:7003: its id or raft address is taken (RAFT.REMOVE it first)"},
		{e(errcode.CatchUpStalled, "900 entries behind", 1),
			"ERR the new node stopped catching up with group 1 (900 entries behind); it stays a non-voter: send RAFT.JOIN again to resume"},
		{e(errcode.ClusterVersion, "1", 2),
			"ERR this command needs cluster version 2, but the cluster runs version 1: upgrade every node first (RAFT.STATUS shows cluster_version)"},
		{e(errcode.ApplyHalted, "group 0, log index 7: unknown entry type 0x09", 0),
			"ERR this node stopped applying the log: group 0, log index 7: unknown entry type 0x09; it serves this group no more until it runs a binary that can apply it (RAFT.STATUS shows apply_error)"},
		{e(errcode.WrongTypeValue, "", 0), "WRONGTYPE Operation against a key holding the wrong kind of value"},
		{e(errcode.NotInteger, "", 0), "ERR value is not an integer or out of range"},
		{e(errcode.IncrOverflow, "", 0), "ERR increment or decrement would overflow"},
		{e(errcode.BadExpire, "", 0), "ERR invalid expire time"},
		{e(errcode.ValueTooLong, "", 512), "ERR value is too long: at most 512 bytes (max-value-len)"},
		{e(errcode.LogWriteFailed, "append to the log in /d/raft-wal failed: no space left on device", 0),
			"MISCONF the Raft log cannot be written, so commands that need it are refused (not applied) until it can: append to the log in /d/raft-wal failed: no space left on device"},
		{e(errcode.Removed, "", 0),
			"ERR this node was removed from the cluster (RAFT.REMOVE) and serves no more as a member: send commands to another node; to serve again, wipe its data dir and RAFT.JOIN it (RAFT.STATUS shows removed:1)"},
		{e(errcode.NotFloat, "", 0), "ERR value is not a valid float"},
		{e(errcode.IncrNaN, "", 0), "ERR increment would produce NaN or Infinity"},
		// Wrapped, the code still decides; without a code, ERR and the text.
		{fmt.Errorf("RL.ALL charge of %q: %w", "k", e(errcode.WrongType, "", 0)),
			"WRONGTYPE Operation against a key holding the wrong kind of limiter"},
		{errors.New("no leader ready"), "ERR no leader ready"},
		{errSyntax, "ERR syntax error"},
		{NewArgError("rate", []byte("x"), "must be a number"), NewArgError("rate", []byte("x"), "must be a number").Error()},
	}
	seen := map[errcode.Code]bool{}
	for _, tt := range tests {
		if got := errorText(tt.err); got != tt.want {
			t.Errorf("%v: %q, want %q", tt.err, got, tt.want)
		}
		if e := errcode.Of(tt.err); e != nil {
			seen[e.Code] = true
		}
	}
	for c := range errcode.NumCodes {
		if codeText(&errcode.Error{Code: c}) == "" {
			t.Errorf("code %v has no reply text", c)
		}
		if !seen[c] {
			t.Errorf("code %v has no test here", c)
		}
	}
}

// TestProtocolErrorTexts pins the reply of every protocol error (Redis
// 7's texts), and that an expected '$' never puts a line end in one.
func TestProtocolErrorTexts(t *testing.T) {
	want := map[protoErr]string{
		protoInvalidMultibulk: "-ERR Protocol error: invalid multibulk length\r\n",
		protoInvalidBulk:      "-ERR Protocol error: invalid bulk length\r\n",
		protoUnauthMultibulk:  "-ERR Protocol error: unauthenticated multibulk length\r\n",
		protoUnauthBulk:       "-ERR Protocol error: unauthenticated bulk length\r\n",
		protoTooBigInline:     "-ERR Protocol error: too big inline request\r\n",
		protoQueryBuffer:      "-ERR Protocol error: query buffer limit exceeded\r\n",
		protoUnbalancedQuotes: "-ERR Protocol error: unbalanced quotes in request\r\n",
		protoExpectedDollar:   "-ERR Protocol error: expected '$', got ':'\r\n",
		protoHTTP:             "", // closes without a reply
	}
	for e := protoErr(1); e < numProtoErrs; e++ {
		w, ok := want[e]
		if !ok {
			t.Errorf("protocol error %d has no test here", e)
		}
		pe := &ProtocolError{what: e, got: ':'}
		if got := pe.Reply(); got != w {
			t.Errorf("protocol error %d: reply %q, want %q", e, got, w)
		}
		if protoErrs[e].reason == "" {
			t.Errorf("protocol error %d has no reason", e)
		}
	}
	for _, c := range []byte{'\r', '\n', 0, 0xff, '{'} {
		got := (&ProtocolError{what: protoExpectedDollar, got: c}).Reply()
		if w := "-ERR Protocol error: expected '$', got '" + map[bool]string{true: "{", false: " "}[c == '{'] + "'\r\n"; got != w {
			t.Errorf("expected '$' for %q: %q, want %q", c, got, w)
		}
	}
}
