package cluster

import (
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/peer"
)

// TestGroupMuxRoutesStreams: a stream dialed by group g's layer arrives
// at group g's Accept with its bytes intact; a stream without the header
// is group 0's (what a node with one group always sent); a stream naming
// a group the host does not run is dropped.
func TestGroupMuxRoutesStreams(t *testing.T) {
	pt := peer.NewTimeouts(time.Second, time.Second)
	m, err := newGroupMux(peer.TCPNetwork{T: pt}, "127.0.0.1:0", "", pt, 3, testLogger(t), "")
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	addr := m.ln.Addr().String()

	for _, g := range []int{0, 1, 2} {
		c, err := m.layers[g].Dial(raft.ServerAddress(addr), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Raft's first byte is an RPC type: 0 to 4.
		msg := []byte{byte(g), 'h', 'i'}
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := acceptRead(t, m.layers[g], len(msg))
		if string(got) != string(msg) {
			t.Errorf("group %d received %q, want %q", g, got, msg)
		}
		c.Close()
	}

	// A stream for group 9 of 3 is closed without reaching any group.
	c, err := peer.Dial(nil, addr, time.Second, pt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(append(muxHeader(9), 0)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a stream for an unknown group was kept open")
	}
}

func acceptRead(t *testing.T, s *groupStream, n int) []byte {
	t.Helper()
	done := make(chan []byte, 1)
	go func() {
		c, err := s.Accept()
		if err != nil {
			done <- nil
			return
		}
		defer c.Close()
		b := make([]byte, n)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, b); err != nil {
			done <- nil
			return
		}
		done <- b
	}()
	select {
	case b := <-done:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("no stream accepted")
		return nil
	}
}
