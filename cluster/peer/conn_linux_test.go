package peer

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestPeerTimeouts(t *testing.T) {
	tests := []struct {
		cluster, heartbeat     time.Duration
		user, dial, ping, idle time.Duration
	}{
		{2 * time.Second, time.Second, time.Second, time.Second, 250 * time.Millisecond, time.Second},
		{500 * time.Millisecond, 50 * time.Millisecond, 500 * time.Millisecond, time.Second, 62500 * time.Microsecond, 500 * time.Millisecond},
		{100 * time.Millisecond, 10 * time.Second, time.Second, time.Second, 50 * time.Millisecond, time.Second},
	}
	for _, tt := range tests {
		got := NewTimeouts(tt.cluster, tt.heartbeat)
		if got.User != tt.user || got.Dial != tt.dial || got.Ping != tt.ping || got.Idle != tt.idle || got.Write != tt.cluster {
			t.Errorf("NewTimeouts(%v, %v) = %+v", tt.cluster, tt.heartbeat, got)
		}
	}
}

// sockopts reads TCP_USER_TIMEOUT (ms) and SO_KEEPALIVE of c.
func sockopts(t *testing.T, c net.Conn) (userMS, keepalive int) {
	t.Helper()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		t.Fatalf("%T is not a TCP connection", c)
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var e1, e2 error
	if err := rc.Control(func(fd uintptr) {
		userMS, e1 = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
		keepalive, e2 = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
	}); err != nil {
		t.Fatal(err)
	}
	if e1 != nil || e2 != nil {
		t.Fatal(e1, e2)
	}
	return userMS, keepalive
}

// TestPeerSocketOptions: forwarding's dials and accepts, and Raft's
// stream layer, all carry TCP_USER_TIMEOUT and keepalive.
func TestPeerSocketOptions(t *testing.T) {
	pt := NewTimeouts(2*time.Second, 700*time.Millisecond)
	ln, err := Listen("127.0.0.1:0", nil, pt)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	d, err := Dial(nil, ln.Addr().String(), time.Second, pt)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a := <-accepted
	defer a.Close()

	// Raft's streams are dialed through the Network (cluster's group mux).
	layer := TCPNetwork{T: pt}
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	r, err := layer.Dial(ln.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ra := <-accepted
	defer ra.Close()
	for name, c := range map[string]net.Conn{"forward dial": d, "forward accept": a, "raft dial": r, "raft accept": ra} {
		user, keep := sockopts(t, c)
		if user != int(pt.User.Milliseconds()) || keep != 1 {
			t.Errorf("%s: TCP_USER_TIMEOUT %d ms, SO_KEEPALIVE %d; want %d ms, 1", name, user, keep, pt.User.Milliseconds())
		}
	}
}
