package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/peer"
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
// Wire format, on a connection to the forward listener that says the hello
// "SLFA\x01" (a connection of its own: the forwarding protocol is unchanged):
//
//	request  = frame(id | RESP address | forward address)   (each codec.AppendStr)
//	response = frame(status byte | text)   status as in forwarding: 0 ok,
//	           1 error, 2 not the ready leader (try again later)
//
// A leader of an older version drops the connection at the unknown hello;
// the follower tries again later, and stays unlisted meanwhile.
const (
	announceHello = "SLFA\x01"
	// maxAnnounce bounds an announcement frame: three short strings.
	maxAnnounce = 4 << 10
	// announcePeriod is how often a follower checks whether the log holds
	// its addresses.
	announcePeriod = 500 * time.Millisecond
)

// announceLoop runs on every node: while a follower whose addresses the log
// does not hold, it announces them to the leader.
func (n *Node) announceLoop() {
	defer n.bg.Done()
	t := time.NewTicker(announcePeriod)
	defer t.Stop()
	for {
		select {
		case <-n.closing:
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
		kind, addr := n.route()
		if kind != routeForward {
			continue
		}
		if err := n.announce(addr, self); err != nil {
			n.log.Debug("announcing this node's addresses to the leader failed; will retry", "leader", addr, "err", err)
		}
	}
}

// announce sends e to the leader at its forward address addr and waits for
// the leader to have committed it.
func (n *Node) announce(addr string, e codec.Leader) error {
	timeout := n.cfg.ClusterTimeout + time.Second
	nc, err := n.cfg.Network.Dial(addr, min(fwdDialTimeout, timeout))
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(timeout))
	var p []byte
	p = codec.AppendStr(p, []byte(e.ID))
	p = codec.AppendStr(p, []byte(e.RESP))
	p = codec.AppendStr(p, []byte(e.Forward))
	if _, err := nc.Write(append(append(n.fwd.groupHello(), announceHello...), peer.Frame(p)...)); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	resp, err := peer.ReadFrame(bufio.NewReader(nc), maxAnnounce)
	if err != nil {
		return fmt.Errorf("read reply: %w", err)
	}
	if len(resp) == 0 {
		return fmt.Errorf("empty reply")
	}
	if resp[0] != fwdStatusOK {
		return fmt.Errorf("leader replied %d: %s", resp[0], resp[1:])
	}
	return nil
}

// handleAnnounce serves one announcement (the hello was read): it appends
// the follower's addresses to the log when this node is the ready leader.
func (s *fwdServer) handleAnnounce(n *Node, c net.Conn, br *bufio.Reader) {
	_ = c.SetDeadline(time.Now().Add(n.cfg.ClusterTimeout + time.Second))
	p, err := peer.ReadFrame(br, maxAnnounce)
	if err != nil {
		if err != io.EOF {
			s.log.Warn("forward listener: bad announcement", "remote", c.RemoteAddr(), "err", err)
		}
		return
	}
	d := codec.NewDecoder(p)
	e := codec.Leader{ID: string(d.Str()), RESP: string(d.Str()), Forward: string(d.Str())}
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%w: stray bytes", codec.ErrMalformed)
	}
	if d.Err == nil && (e.ID == "" || checkHostPort(e.RESP) != nil || checkHostPort(e.Forward) != nil) {
		d.Err = fmt.Errorf("%w: announcement %q %q %q", codec.ErrMalformed, e.ID, e.RESP, e.Forward)
	}
	reply := func(status byte, text string) {
		_, _ = c.Write(peer.Frame(append([]byte{status}, text...)))
	}
	if d.Err != nil {
		s.log.Warn("forward listener: malformed announcement", "remote", c.RemoteAddr(), "err", d.Err)
		reply(fwdStatusError, d.Err.Error())
		return
	}
	if kind, _ := n.route(); kind != routeLocal {
		reply(fwdStatusRetry, "not the ready leader")
		return
	}
	if old, ok := n.fsm.leader(e.ID); ok && old == e {
		reply(fwdStatusOK, "")
		return
	}
	if err := n.waitWhileLeader(n.raft.Apply(codec.AppendLeaderEntry(nil, e), n.cfg.ClusterTimeout)); err != nil {
		reply(fwdStatusRetry, err.Error())
		return
	}
	n.log.Info("recorded a member's addresses", "id", e.ID, "resp", e.RESP, "forward", e.Forward)
	reply(fwdStatusOK, "")
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
