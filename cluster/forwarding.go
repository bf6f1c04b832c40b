package cluster

import (
	"context"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/engine"
)

// fwdGroup is a node as its host's forward port sees it (forward.Group):
// forwarded batches go to its group commit through acceptForwarded
// (execute.go), their deadline timers come from its pool, and their errors
// go back in the form the group's followers know.
type fwdGroup struct{ n *Node }

// The two ways a try of a batch goes (execute.go).
var (
	_ forward.Submitter = (*batcher)(nil)
	_ forward.Submitter = (*forward.Client)(nil)
)

func (g fwdGroup) Accept(ctx context.Context, deadline <-chan time.Time, id codec.BatchID, ops []engine.Op, results []engine.Result) (forward.Pending, byte, error) {
	return g.n.acceptForwarded(ctx, deadline, id, ops, results)
}

func (g fwdGroup) Timeout() time.Duration { return g.n.cfg.ClusterTimeout }

func (g fwdGroup) Timer(d time.Duration) *time.Timer { return g.n.timers.get(d) }

func (g fwdGroup) PutTimer(t *time.Timer) { g.n.timers.put(t) }

// ForPeers: while the group's cluster version is below this build's,
// members of older releases may be the followers asking: errors they
// would not know are sent as ones they do (errorsFor, version.go).
func (g fwdGroup) ForPeers(err error, results []engine.Result) error {
	if cv := g.n.fsm.clusterVersion(); cv < SupportedVersion {
		err = errorFor(err, cv)
		errorsFor(results, cv)
	}
	return err
}
