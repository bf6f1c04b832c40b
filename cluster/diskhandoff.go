package cluster

import (
	"time"

	"github.com/hashicorp/raft"
)

// handOffAfterFault runs when this node, as leader, failed to append to
// its log (cluster/logstore/faultstore.go): Raft steps down, and the others would elect a
// leader only after their heartbeat timeout (a second or more, while
// clients get CLUSTERDOWN). Instead it asks a voter to start an election
// at once, with the TimeoutNow request Raft's own leadership transfer
// sends (whose votes are granted even though the voters still knew a
// leader). This node neither campaigns nor votes while its log cannot be
// written, so the others elect one of themselves. Best effort: when the
// voter asked cannot win (its log is behind), the usual timeouts follow.
func (n *Node) handOffAfterFault() {
	if !n.lead.handingOff.CompareAndSwap(false, true) {
		return
	}
	n.life.spawn(func() {
		defer n.lead.handingOff.Store(false)
		for deadline := time.Now().Add(time.Second); n.raft.State() == raft.Leader; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				return
			}
		}
		f := n.raft.GetConfiguration()
		if waitFuture(n.life.closing, f, time.Second) != nil {
			return
		}
		id := raft.ServerID(n.cfg.ID)
		for _, s := range f.Configuration().Servers {
			if s.Suffrage != raft.Voter || s.ID == id {
				continue
			}
			req := &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax,
				ID: []byte(id), Addr: n.transport.EncodePeer(id, n.transport.LocalAddr())}}
			var resp raft.TimeoutNowResponse
			if err := n.transport.TimeoutNow(s.ID, s.Address, req, &resp); err == nil {
				n.log.Warn("this node's log cannot be written: asked another voter to take the leadership at once", "to", s.ID)
				return
			}
		}
	})
}
