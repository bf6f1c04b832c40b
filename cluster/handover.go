package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Graceful stop (docs/operations.md, "Stopping a node"; docs/design.md,
// "Handovers").
//
// A node about to stop first hands over: it stops accepting leaderships
// (stoppingTransport refuses the TimeoutNow RPC that a leadership transfer
// sends its target, so another node's balancer cannot hand a group back to
// it meanwhile), transfers the leadership of every group it leads to
// another voter, and waits until the entries it handed to Raft as leader
// and the batches followers forwarded to it are answered. Only then does
// the process stop reading commands, answer those it read (they go to the
// new leaders through forwarding), close its connections and stop Raft.
//
// The commands a transfer catches are answered as if nothing had happened
// (batcher.go): those not yet in an entry are refused by Raft before it
// appends them and routed again, to the new leader; those in an entry get
// the entry's real outcome, which this node learns by applying its own log
// (the new leader commits the entry, or another entry takes its index).

// errStoppingNoLeadership refuses a leadership transfer to a node that is
// stopping.
var errStoppingNoLeadership = errors.New("this node is stopping: it takes no leadership")

// stoppingTransport is a node's Raft transport that refuses TimeoutNow (the
// last step of a leadership transfer to this node) once stopping is set:
// the transfer fails on its leader, which keeps leading. Everything else
// passes through; the RPCs raft consumes go through one more goroutine.
type stoppingTransport struct {
	raft.Transport
	stopping  *atomic.Bool
	out       chan raft.RPC
	done      chan struct{}
	closeOnce sync.Once
}

// newStoppingTransport wraps t, or returns t itself when it does not
// support pre-vote (raft decides whether to pre-vote by the transport's
// type, so the wrapper must not claim what t cannot do).
func newStoppingTransport(t raft.Transport, stopping *atomic.Bool) raft.Transport {
	if _, ok := t.(raft.WithPreVote); !ok {
		return t
	}
	st := &stoppingTransport{Transport: t, stopping: stopping, out: make(chan raft.RPC), done: make(chan struct{})}
	go st.pump(t.Consumer())
	return st
}

// Consumer implements raft.Transport.
func (t *stoppingTransport) Consumer() <-chan raft.RPC { return t.out }

func (t *stoppingTransport) pump(in <-chan raft.RPC) {
	for {
		var rpc raft.RPC
		select {
		case rpc = <-in:
		case <-t.done:
			return
		}
		if _, ok := rpc.Command.(*raft.TimeoutNowRequest); ok && t.stopping.Load() {
			rpc.Respond(&raft.TimeoutNowResponse{}, errStoppingNoLeadership)
			continue
		}
		select {
		case t.out <- rpc:
		case <-t.done:
			return // as raft itself, once shut down: no answer
		}
	}
}

// RequestPreVote implements raft.WithPreVote.
func (t *stoppingTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp)
}

// Close implements raft.WithClose: it stops the pump and closes the
// transport below (if it closes). It may be called more than once.
func (t *stoppingTransport) Close() error {
	var err error
	t.closeOnce.Do(func() {
		close(t.done)
		if c, ok := t.Transport.(raft.WithClose); ok {
			err = c.Close()
		}
	})
	return err
}

// handoverRetry is how long Handover waits before trying another transfer.
const handoverRetry = 50 * time.Millisecond

// Handover prepares the node to stop: from now on it refuses leadership
// transfers to itself, and it transfers the leadership it holds to another
// voter (the one Raft picks, then each by name, until one takes it or ctx
// ends; if none does, it keeps the leadership), then waits
// until the entries it handed to Raft as leader are answered. A node alone
// in its group keeps its leadership. It returns ctx's error if it could
// not finish in time; the node serves on either way until Close.
func (n *Node) Handover(ctx context.Context) error {
	n.lead.stopping.Store(true)
	for attempt := 0; n.raft.State() == raft.Leader; attempt++ {
		servers, err := n.servers()
		if err != nil {
			return fmt.Errorf("cluster: handover: %w", err)
		}
		var others []string
		for _, id := range voterIDs(servers) {
			if id != n.cfg.ID {
				others = append(others, id)
			}
		}
		if len(others) == 0 {
			break // nobody to hand over to
		}
		if attempt > len(others) {
			// Raft's pick and every voter by name failed (the others are
			// down or far behind): stop as the leader, as after a crash.
			n.log.Warn("handover: no voter took the leadership; stopping as the leader")
			break
		}
		// The first try lets Raft pick the most up-to-date voter; later
		// ones name each voter in turn (the one Raft picked may be down).
		to := ""
		if attempt > 0 {
			to = others[attempt%len(others)]
		}
		tctx, cancel := context.WithTimeout(ctx, n.adminTimeout())
		err = n.Transfer(tctx, to)
		cancel()
		if err == nil {
			n.log.Info("handover: leadership transferred", "to", to)
			continue
		}
		n.log.Warn("handover: leadership transfer failed; trying again", "to", to, "err", err)
		select {
		case <-time.After(handoverRetry):
		case <-ctx.Done():
			return fmt.Errorf("cluster: handover: %w", ctx.Err())
		case <-n.life.closing:
			return ErrShuttingDown
		}
	}
	return n.awaitEntries(ctx)
}

// handOffAgain hands over a leadership won in an election while stopping.
func (n *Node) handOffAgain() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*n.adminTimeout())
	defer cancel()
	if err := n.Handover(ctx); err != nil {
		n.log.Warn("handover: could not hand over a leadership won while stopping", "err", err)
	}
}

// awaitEntries waits until no entry this node handed to Raft awaits its
// outcome.
func (n *Node) awaitEntries(ctx context.Context) error {
	return pollUntil(ctx, func() bool { return n.batcher.awaiting.Load() == 0 })
}

// pollUntil polls done every few milliseconds until it holds or ctx ends.
func pollUntil(ctx context.Context, done func() bool) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !done() {
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("cluster: handover: %w", ctx.Err())
		}
	}
	return nil
}

// Handover prepares the host to stop (Node.Handover, for every group at
// once): its balancer stops, it takes no leadership any more, it hands
// over the groups it leads, and it waits until the batches followers
// forwarded to it are answered. The host serves on (as a follower of
// every group) until Close.
func (h *Host) Handover(ctx context.Context) error {
	h.stopping.Store(true)
	errs := h.inEveryGroup(func(g int, n *Node) error {
		if err := n.Handover(ctx); err != nil {
			return fmt.Errorf("group %d: %w", g, err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return pollUntil(ctx, func() bool { return h.fwdSrv.Inflight() == 0 })
}
