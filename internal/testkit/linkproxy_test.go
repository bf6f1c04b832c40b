package testkit

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with itself.
func echoServer(t *testing.T) string {
	t.Helper()
	return Serve(t, func(c net.Conn) {
		defer c.Close()
		_, _ = io.Copy(c, c)
	}).Addr().String()
}

// roundTrip sends a line and reads it back within d.
func roundTrip(c net.Conn, rd *bufio.Reader, line string, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

// proxiedEcho starts an echo server behind a link proxy; dial connects
// through the proxy.
func proxiedEcho(t *testing.T) (p *LinkProxy, dial func() (net.Conn, *bufio.Reader)) {
	t.Helper()
	p, err := NewLinkProxy(echoServer(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
}

func TestLinkProxy(t *testing.T) {
	p, dial := proxiedEcho(t)
	c, rd := dial()
	if got, err := roundTrip(c, rd, "up", time.Second); err != nil || got != "up" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}

	// Dropping: silence, then the held bytes arrive intact on heal.
	set := func(m LinkMode) {
		t.Helper()
		if err := p.Set(m); err != nil {
			t.Fatal(err)
		}
	}
	set(LinkDrop)
	if got, err := roundTrip(c, rd, "held", 200*time.Millisecond); err == nil {
		t.Fatalf("a dropped link answered %q", got)
	}
	set(LinkUp)
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if got, err := rd.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after heal: %q, %v", got, err)
	}
	c2, rd2 := dial() // a connection made while dropping waits too
	set(LinkDrop)
	c3, rd3 := dial()
	if _, err := roundTrip(c3, rd3, "new", 200*time.Millisecond); err == nil {
		t.Fatal("a new connection crossed a dropped link")
	}
	set(LinkUp)
	_ = c3.SetDeadline(time.Now().Add(time.Second))
	if got, err := rd3.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("new connection after heal: %q, %v", got, err)
	}

	// Rejecting: existing connections close, new ones close at once.
	set(LinkReject)
	_ = c2.SetDeadline(time.Now().Add(time.Second))
	if _, err := rd2.ReadString('\n'); err == nil {
		t.Fatal("a rejecting link kept a connection open")
	}
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		c.Close()
		t.Fatal("a rejecting link took a new connection")
	}
	set(LinkUp)
	c5, rd5 := dial()
	if got, err := roundTrip(c5, rd5, "back", time.Second); err != nil || got != "back" {
		t.Fatalf("after the reject heals: %q, %v", got, err)
	}

	// The node behind is down: dials are refused, as without a proxy.
	p.TargetDown()
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		c.Close()
		t.Fatal("a proxy in front of a down node accepted a connection")
	}
	if err := p.TargetUp(); err != nil {
		t.Fatal(err)
	}
	c6, rd6 := dial()
	if got, err := roundTrip(c6, rd6, "again", time.Second); err != nil || got != "again" {
		t.Fatalf("after the node is up again: %q, %v", got, err)
	}
}

// TestLinkProxyStall: a stalled link is silent; on heal, the connections
// that lived through the stall stay silent (as TCP deep in retransmission
// backoff), and new ones pass.
func TestLinkProxyStall(t *testing.T) {
	p, dial := proxiedEcho(t)
	old, oldRd := dial()
	if got, err := roundTrip(old, oldRd, "up", time.Second); err != nil || got != "up" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	if err := p.Set(LinkStall); err != nil {
		t.Fatal(err)
	}
	during, duringRd := dial()
	if got, err := roundTrip(old, oldRd, "held", 200*time.Millisecond); err == nil {
		t.Fatalf("a stalled link answered %q", got)
	}
	if err := p.Set(LinkUp); err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(old, oldRd, "still", 300*time.Millisecond); err == nil {
		t.Fatalf("a connection from before the stall answered %q after the heal", got)
	}
	if got, err := roundTrip(during, duringRd, "during", 300*time.Millisecond); err == nil {
		t.Fatalf("a connection made during the stall answered %q after the heal", got)
	}
	fresh, freshRd := dial()
	if got, err := roundTrip(fresh, freshRd, "fresh", time.Second); err != nil || got != "fresh" {
		t.Fatalf("a new connection after the heal: %q, %v", got, err)
	}
}
