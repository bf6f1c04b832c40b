package cluster

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/internal/slots"
)

// Address announcements: how every node learns every node's RESP address.
//
// The Redis Cluster commands list every member with the address its clients
// connect to, and every node must answer alike. The FSM keeps a map from
// node ID to addresses (RESP and forward), replicated through the log:
// a leader appends its own entry once it is ready (becomeReady). A follower
// cannot append to the log, so once it knows a ready leader and sees that
// the log does not hold its current addresses it announces them to the
// leader over the forward listener, which appends the same kind of entry on
// its behalf. The map lives in snapshots, so a node that restores one knows
// every address at once.
//
// The announcement is the control channel's method "announce"
// (controlmethods.go; to and from older releases, the hello "SLFA\x01":
// legacy.go). A follower whose announcement fails tries again later, and
// stays unlisted meanwhile.

// announcePeriod is how often a follower checks whether the log holds its
// addresses.
const announcePeriod = 500 * time.Millisecond

// announceLoop runs on every node: while a follower whose addresses the log
// does not hold, it announces them to the leader.
func (n *Node) announceLoop() {
	t := time.NewTicker(announcePeriod)
	defer t.Stop()
	for {
		select {
		case <-n.life.closing:
			return
		case <-t.C:
		}
		n.noteRemoved()
		if n.raft.State() == raft.Leader {
			continue // becomeReady announces a leader
		}
		self := codec.Leader{ID: n.cfg.ID, RESP: n.cfg.RESPAddr, Forward: n.fwdAddr}
		if e, ok := n.fsm.leader(n.cfg.ID); ok && e == self {
			continue
		}
		r := n.route()
		if r.kind != routeForward {
			continue
		}
		if err := n.announce(r.addr, self); err != nil {
			n.log.Debug("announcing this node's addresses to the leader failed; will retry", "leader", r.addr, "err", err)
		}
	}
}

// announce sends e to the leader at its forward address addr and waits for
// the leader to have committed it.
func (n *Node) announce(addr string, e codec.Leader) error {
	if _, status, err := call(context.Background(), n, addr, announceMethod, announceReq{e}); status != forward.StatusOK {
		return fmt.Errorf("leader replied %d: %w", status, err)
	}
	return nil
}

// serve is announceMethod's handler: it appends the follower's addresses
// to the log when this node is the ready leader.
func (r announceReq) serve(_ context.Context, n *Node) (none, error) {
	e := r.Leader
	if e.ID == "" || checkHostPort(e.RESP) != nil || checkHostPort(e.Forward) != nil {
		return none{}, fmt.Errorf("%w: announcement %q %q %q", codec.ErrMalformed, e.ID, e.RESP, e.Forward)
	}
	if kind := n.route().kind; kind != routeLocal {
		return none{}, fmt.Errorf("%w: not the ready leader", errRouteAgain)
	}
	if old, ok := n.fsm.leader(e.ID); ok && old == e {
		return none{}, nil
	}
	if err := n.waitWhileLeader(n.raft.Apply(codec.AppendLeaderEntry(nil, e), n.cfg.ClusterTimeout)); err != nil {
		return none{}, fmt.Errorf("%w: %w", errRouteAgain, err)
	}
	n.log.Info("recorded a member's addresses", "id", e.ID, "resp", e.RESP, "forward", e.Forward)
	return none{}, nil
}

// voters serves Host.Topology (from group 0): the voters of the group's
// configuration with the RESP addresses the log holds for them, by ID.
func (n *Node) voters() []slots.Node {
	servers, err := n.servers()
	if err != nil {
		return nil
	}
	var nodes []slots.Node
	for _, s := range servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		m := slots.Node{ID: string(s.ID)}
		if m.ID == n.cfg.ID {
			m.RESPAddr = n.cfg.RESPAddr
		} else if e, ok := n.fsm.leader(m.ID); ok {
			m.RESPAddr = e.RESP
		}
		nodes = append(nodes, m)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	return nodes
}

// leaderRESP serves Host.Route: whether this node leads its group, and
// otherwise the RESP address of the group's leader as the log announced
// it ("" while unknown).
func (n *Node) leaderRESP() (addr string, local bool) {
	if n.raft.State() == raft.Leader {
		return "", true
	}
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return "", false
	}
	if e, ok := n.fsm.leader(string(id)); ok {
		return e.RESP, false
	}
	return "", false
}
