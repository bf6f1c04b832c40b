package forward

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/outcome"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// Errors of cluster's that the tests meet (the same codes), and the
// sentinels a decoded error turns back into, as cluster's are.
var (
	errLoading     error = errcode.New(errcode.Loading)
	errClusterDown error = errcode.New(errcode.ClusterDown)
	testSentinels        = codec.Sentinels{engine.ErrWrongType, errLoading, errClusterDown,
		outcome.ErrUncertain, outcome.ErrOutcomeUnknown, outcome.ErrShuttingDown, ErrBadReply, ErrConnLost}
)

// newFwdClient is a client of group with a pool of size connections, as
// a node builds it.
func newFwdClient(group, size int, timeout time.Duration, t peer.Timeouts, network peer.Network) *Client {
	return NewClient(ClientConfig{Group: group, Size: size, Timeout: timeout, T: t, Network: network, Sentinels: testSentinels})
}

// submitTo is a try of ops forwarded by c to the leader at addr.
func submitTo(c *Client, ctx context.Context, deadline <-chan time.Time, until time.Time, addr string, id codec.BatchID, ops []engine.Op, results []engine.Result) outcome.Attempt {
	return c.Submit(ctx, deadline, Batch{ID: id, Ops: ops, Results: results, Addr: addr, Until: until})
}

// waitFor is testkit.Eventually polling every 5 ms.
func waitFor(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	testkit.Eventually(t, timeout, 5*time.Millisecond, fn)
}

var tokenRule = engine.Rule{Kind: engine.KindToken, Limit: 5, Period: int64(time.Hour)}

func decide(key string, rule engine.Rule, cost int64) engine.Op {
	return engine.Op{Code: engine.OpDecide, Key: []byte(key), Rule: rule, Cost: cost}
}
