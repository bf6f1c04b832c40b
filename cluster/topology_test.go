package cluster

import (
	"bufio"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/internal/slots"
)

// TestTopologyAnnouncesEveryMember: followers announce their RESP addresses
// through the leader, so every node lists every member with its address
// and the same leader, and Route sends a follower's commands to the
// leader's RESP address.
func TestTopologyAnnouncesEveryMember(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	leader := tc.leader()
	leaderID := tc.cfgs[leader].ID
	want := []slots.Node{{ID: "n1", RESPAddr: "127.0.0.1:6001"}, {ID: "n2", RESPAddr: "127.0.0.1:6002"}, {ID: "n3", RESPAddr: "127.0.0.1:6003"}}
	waitFor(t, 10*time.Second, func() error {
		for i, h := range tc.hosts {
			top := h.Topology()
			if top.Self != tc.cfgs[i].ID {
				return fmt.Errorf("node %d: self %q", i+1, top.Self)
			}
			if fmt.Sprint(top.Nodes) != fmt.Sprint(want) {
				return fmt.Errorf("node %d: nodes %v, want %v", i+1, top.Nodes, want)
			}
			if len(top.Groups) != 1 || top.Groups[0].Range != (slots.Range{First: 0, Last: slots.Count - 1}) || top.Groups[0].Leader != leaderID {
				return fmt.Errorf("node %d: groups %+v, want one of every slot led by %s", i+1, top.Groups, leaderID)
			}
		}
		return nil
	})
	for i, h := range tc.hosts {
		addr, local := h.Route(0)
		if i == leader {
			if !local {
				t.Errorf("leader n%d: Route = %q, %v; want local", i+1, addr, local)
			}
		} else if local || addr != tc.cfgs[leader].RESPAddr {
			t.Errorf("follower n%d: Route = %q, %v; want %s", i+1, addr, local, tc.cfgs[leader].RESPAddr)
		}
	}
	if addr, local := tc.hosts[0].Route(1); local || addr != "" {
		t.Errorf("Route of a group that does not exist: %q, %v", addr, local)
	}
}

// TestAnnounceRefusesMalformed: an announcement that does not decode, or
// names no usable address, is answered with an error and appends nothing.
func TestAnnounceRefusesMalformed(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	n := tc.nodes[0]
	nw := tc.net.Node("test")
	before := n.raft.LastIndex()
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"garbage", []byte{0xff, 0xff, 0xff}},
		{"empty id", codec.AppendStr(codec.AppendStr(codec.AppendStr(nil, nil), []byte("127.0.0.1:1")), []byte("127.0.0.1:2"))},
		{"bad address", codec.AppendStr(codec.AppendStr(codec.AppendStr(nil, []byte("x")), []byte("nowhere")), []byte("127.0.0.1:2"))},
		{"stray bytes", append(codec.AppendStr(codec.AppendStr(codec.AppendStr(nil, []byte("x")), []byte("127.0.0.1:1")), []byte("127.0.0.1:2")), 0)},
	} {
		c, err := nw.Dial(n.fwdAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(append([]byte(announceMethod.legacy.hello), peer.Frame(tc.payload)...)); err != nil {
			t.Fatal(err)
		}
		reply, err := peer.ReadFrame(bufio.NewReader(c), maxErrReply)
		c.Close()
		if err != nil || len(reply) == 0 || reply[0] != forward.StatusError {
			t.Errorf("%s: reply %q, %v; want an error status", tc.name, reply, err)
		}
	}
	if _, ok := n.fsm.leader("x"); ok || n.raft.LastIndex() != before {
		t.Fatalf("a malformed announcement reached the log (last index %d -> %d)", before, n.raft.LastIndex())
	}
}
