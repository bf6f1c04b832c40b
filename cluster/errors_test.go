package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/cluster/outcome"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// wireError is what err becomes on the wire: its code and details, or an
// Other error naming its text when it has no code.
func wireError(err error) errcode.Error {
	if e := errcode.Of(err); e != nil {
		return errcode.Error{Code: e.Code, Detail: e.Detail, Num: e.Num}
	}
	return errcode.Error{Code: errcode.Other, Detail: err.Error()}
}

// TestErrorCodesRoundTrip: every error a leader answers a forwarded batch
// with comes back on the follower with its code and details (the very
// sentinel when it has none), and its class: CLUSTERDOWN (not applied) and
// UNCERTAIN (may have been) never mix.
func TestErrorCodesRoundTrip(t *testing.T) {
	for _, err := range []error{ErrLoading, ErrOutcomeUnknown, ErrShuttingDown, outcome.ClusterDownError(2 * time.Second),
		outcome.ClusterDownError(time.Minute), outcome.CommitTimeoutError(time.Second), lostQuorumError(time.Second), errDuplicateBatch,
		forward.ErrBadReply, forward.ErrConnLost, internalError("%d results for %d operations", 1, 2)} {
		d := codec.NewDecoder(codec.AppendError(nil, err))
		back := d.CodedError(sentinels)
		if d.Err != nil || len(d.B) != 0 {
			t.Fatalf("%v: %v, %d bytes left", err, d.Err, len(d.B))
		}
		if wireError(back) != wireError(err) || !errors.Is(back, err) {
			t.Fatalf("%v came back as %v", err, back)
		}
		if e := errcode.Of(err); e.Detail == "" && e.Num == 0 && back != err {
			t.Fatalf("%v came back as another value", err)
		}
		if errors.Is(back, ErrClusterDown) && errors.Is(back, ErrUncertain) {
			t.Fatalf("%v: both CLUSTERDOWN and UNCERTAIN", err)
		}
		if errors.Is(back, ErrUncertain) != (errcode.Of(err).Code.Class() == errcode.MayHaveApplied) {
			t.Fatalf("%v: its code and its class differ", err)
		}
	}
	if !errors.Is(outcome.ClusterDownError(time.Minute), ErrClusterDown) || errcode.Of(outcome.ClusterDownError(time.Minute)).Num != int64(time.Minute) {
		t.Fatal("CLUSTERDOWN lost its identity or its timeout")
	}
	// A code this node does not know is malformed, never guessed at.
	d := codec.NewDecoder(codec.AppendError(nil, &errcode.Error{Code: errcode.NumCodes}))
	if d.CodedError(sentinels); !errors.Is(d.Err, codec.ErrMalformed) {
		t.Fatalf("unknown code: %v", d.Err)
	}
}
