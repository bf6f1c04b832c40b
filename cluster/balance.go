package cluster

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Leader balance (docs/design.md, "Sharding"). Every group prefers one
// member as its leader: with the members in ID order, group g prefers
// member g mod members, so with as many groups as members each leads one.
// Elections do not know this: at start-up, and whenever a member fails and
// the survivors take its groups over, leaderships land wherever an
// election put them. So each host, every balanceEvery, looks at the groups
// it leads, and hands the first one that another member prefers over to
// that member (raft's leadership transfer, which first brings the member
// up to date and fails if it cannot within an election timeout). One
// transfer per round per host; a member a transfer failed to reach is
// left alone for a while, doubling up to balanceBackoffMax, so that a
// member that is down or far behind costs the group a short pause (new
// commands wait while a transfer is under way) at most that often. When
// such a member answers the leader's heartbeats again (it restarted, or a
// partition healed: Raft reports it to the leader as a resumed
// heartbeat), it starts afresh: tried at the next round, then, should it
// still be catching up, after balanceBackoffMin. So a member that was down
// for minutes gets its groups back within seconds of its return, not up
// to balanceBackoffMax later; a member whose link flaps costs its groups
// one transfer attempt per return.
//
// A transfer fails none of the commands in flight at that instant
// (handover.go; docs/design.md, "Handovers"). A member that is stopping
// refuses transfers to it (stoppingTransport): the transfer fails, and
// the member is left alone as one that is down.

const (
	// balanceEvery is how often a host looks at the groups it leads.
	balanceEvery = time.Second
	// balanceBackoffMin and balanceBackoffMax bound how long a member a
	// transfer failed to reach is left alone.
	balanceBackoffMin = 5 * time.Second
	balanceBackoffMax = time.Minute
)

// balanceWait is how long the balancer leaves a member alone after a
// failed transfer to it.
type balanceWait struct {
	until time.Time
	next  time.Duration
}

// balance runs on every host with more than one group until it closes.
func (h *Host) balance() {
	t := time.NewTicker(balanceEvery)
	defer t.Stop()
	failed := map[string]balanceWait{}
	resumed := make(chan raft.Observation, 16) // full: dropped, and that backoff runs out as before
	obs := raft.NewObserver(resumed, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.ResumedHeartbeatObservation)
		return ok
	})
	for _, n := range h.nodes {
		n.raft.RegisterObserver(obs)
	}
	defer func() {
		for _, n := range h.nodes {
			n.raft.DeregisterObserver(obs)
		}
	}()
	for {
		select {
		case <-h.life.closing:
			return
		case o := <-resumed:
			delete(failed, string(o.Data.(raft.ResumedHeartbeatObservation).PeerID))
			continue
		case <-t.C:
		}
		if h.stopping.Load() {
			continue // handing over before a stop (handover.go)
		}
		h.forgetRemoved(failed)
		for g, n := range h.nodes {
			if n.raft.State() != raft.Leader {
				continue
			}
			if kind := n.route().kind; kind != routeLocal {
				continue // not ready yet: let it finish its barrier
			}
			if n.membership.busy.Load() > 0 {
				continue // a membership step runs on this leader (membership.go)
			}
			servers, err := n.servers()
			if err != nil {
				continue
			}
			want := preferredLeader(g, voterIDs(servers))
			if want == "" || want == h.cfg.ID {
				continue
			}
			w := failed[want]
			if time.Now().Before(w.until) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), n.adminTimeout())
			err = n.Transfer(ctx, want)
			cancel()
			if err != nil {
				w.next = min(max(2*w.next, balanceBackoffMin), balanceBackoffMax)
				w.until = time.Now().Add(w.next)
				failed[want] = w
				h.log.Info("balance: leadership transfer failed; will retry later", "group", g, "to", want, "retry_in", w.next, "err", err)
			} else {
				delete(failed, want)
				h.log.Info("balance: handed leadership to its preferred member", "group", g, "to", want)
			}
			break // one transfer per round
		}
	}
}

// forgetRemoved drops from failed the members no group has any more
// (RAFT.REMOVE), so that a cluster whose machines are replaced for years
// keeps no trace of the old ones.
func (h *Host) forgetRemoved(failed map[string]balanceWait) {
	if len(failed) == 0 {
		return
	}
	members := map[string]bool{}
	for _, n := range h.nodes {
		servers, err := n.servers()
		if err != nil {
			return // keep all until every group answers
		}
		for _, s := range servers {
			members[string(s.ID)] = true
		}
	}
	for id := range failed {
		if !members[id] {
			delete(failed, id)
		}
	}
}

// preferredLeader is the member group g's leadership belongs to when all
// are up: members in ID order, group g on member g mod members.
func preferredLeader(g int, members []string) string {
	if len(members) == 0 {
		return ""
	}
	return members[g%len(members)]
}

// voterIDs returns the voters of a group's configuration, sorted.
func voterIDs(servers []raft.Server) []string {
	ids := map[string]bool{}
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			ids[string(s.ID)] = true
		}
	}
	return slices.Sorted(maps.Keys(ids))
}
