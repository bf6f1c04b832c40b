package freeport

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestPortsBelowTheEphemeralRange(t *testing.T) {
	end := ephemeralStart(rangeFile)
	ports, err := Ports(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if end-lowest >= 1000 && (p < lowest || p >= end) {
			t.Errorf("port %d outside [%d, %d)", p, lowest, end)
		}
		if seen[p] {
			t.Errorf("port %d twice", p)
		}
		seen[p] = true
		// Ports returns them free: each can be bound again.
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d not free: %v", p, err)
			continue
		}
		ln.Close()
	}
}

func TestListenHoldsThePort(t *testing.T) {
	ln, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := net.Listen("tcp", ln.Addr().String()); err == nil {
		t.Fatalf("%s could be bound twice", ln.Addr())
	}
}

func TestEphemeralStart(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, text string
		want       int
	}{
		{"linux default", "32768\t60999\n", 32768},
		{"raised", "40000 65000\n", 40000},
		{"garbage", "lots\n", defaultEphemeral},
		{"one number", "40000\n", defaultEphemeral},
		{"out of range", "0 65000\n", defaultEphemeral},
	}
	for _, c := range cases {
		path := filepath.Join(dir, c.name)
		if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := ephemeralStart(path); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	if got := ephemeralStart(filepath.Join(dir, "missing")); got != defaultEphemeral {
		t.Errorf("missing file: %d", got)
	}
}

// TestEmptyRangeFallsBackToAnyPort: with no room below the ephemeral range
// (a kernel configured to start it at or under lowest), a port is still
// found, from the kernel. Drawing from the empty range would panic.
func TestEmptyRangeFallsBackToAnyPort(t *testing.T) {
	for _, end := range []int{lowest, lowest - 1000, lowest + 999} {
		ln, err := listenBelow(end)
		if err != nil {
			t.Fatalf("end %d: %v", end, err)
		}
		if ln.Addr().(*net.TCPAddr).Port == 0 {
			t.Fatalf("end %d: no port", end)
		}
		ln.Close()
	}
}
