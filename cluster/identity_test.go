package cluster

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/peer"
)

// TestClusterIdentityStreams: a Raft stream between two hosts of the same
// restored cluster reaches its group; one between a restored cluster and
// another (with another identity, or none, in either direction) is
// dropped before Raft sees a byte.
func TestClusterIdentityStreams(t *testing.T) {
	pt := peer.NewTimeouts(time.Second, time.Second)
	mux := func(id string) *groupMux {
		m, err := newGroupMux(peer.TCPNetwork{T: pt}, "127.0.0.1:0", "", pt, 2, testLogger(t), id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.close)
		return m
	}
	restored, restored2, other, old := mux("c0ffee"), mux("c0ffee"), mux("beef"), mux("")
	tests := []struct {
		from, to *groupMux
		ok       bool
	}{
		{restored2, restored, true},
		{old, old, true},
		{old, restored, false},
		{restored, old, false},
		{other, restored, false},
	}
	for i, tc := range tests {
		for _, g := range []int{0, 1} {
			c, err := tc.from.layers[g].Dial(raft.ServerAddress(tc.to.ln.Addr().String()), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			msg := []byte{byte(g), 'h', 'i'}
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			if tc.ok {
				if got := acceptRead(t, tc.to.layers[g], len(msg)); string(got) != string(msg) {
					t.Errorf("case %d group %d: received %q", i, g, got)
				}
			} else {
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, err := c.Read(make([]byte, 1))
				if ne, ok := err.(net.Error); err == nil || ok && ne.Timeout() {
					t.Errorf("case %d group %d: a stream across clusters was kept open (%v)", i, g, err)
				}
			}
			c.Close()
		}
	}
}
