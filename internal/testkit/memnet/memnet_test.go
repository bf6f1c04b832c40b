package memnet

import (
	"io"
	"testing"
	"time"
)

// TestInmem: a dial reaches the listener at its address and carries bytes
// both ways; a cut link refuses dials and closes its connections, the
// other direction stays up, and Heal restores it; a closed listener frees
// its address.
func TestInmem(t *testing.T) {
	m := NewInmem()
	a, b := m.Node("a"), m.Node("b")
	ln, err := b.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if _, err := a.Listen(addr); err == nil {
		t.Fatal("two listeners on one address")
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, err = io.Copy(c, c) // echo until closed
		}
		accepted <- err
	}()
	c, err := a.Dial(addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	go func() { _, _ = c.Write([]byte("hi")) }()
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("echo %q %v", buf, err)
	}

	m.Cut("a", addr)
	if _, err := c.Read(buf); err == nil {
		t.Fatal("a connection across a cut link still reads")
	}
	if _, err := a.Dial(addr, time.Second); err == nil {
		t.Fatal("dial across a cut link")
	}
	// connects dials addr from n while the listener accepts once.
	connects := func(n Node, what string) {
		t.Helper()
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Close()
			}
		}()
		c, err := n.Dial(addr, time.Second)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		c.Close()
	}
	connects(b, "the other direction")
	m.Heal("a", addr)
	connects(a, "after Heal")

	ln.Close()
	if _, err := a.Dial(addr, time.Second); err == nil {
		t.Fatal("dial to a closed listener")
	}
	ln2, err := a.Listen(addr)
	if err != nil {
		t.Fatalf("the address of a closed listener: %v", err)
	}
	ln2.Close()
}

// TestInmemPipe: an in-memory connection buffers what is written (a write
// returns before the other end reads, up to pipeBuffer), keeps the bytes
// written before a close for the reader, then EOF; deadlines fail calls
// with a timeout; a write to a closed end fails.
func TestInmemPipe(t *testing.T) {
	a, b := newPipePair()
	if n, err := a.Write([]byte("hello")); n != 5 || err != nil {
		t.Fatalf("buffered write: %d %v", n, err)
	}
	a.Close()
	got, err := io.ReadAll(b)
	if string(got) != "hello" || err != nil {
		t.Fatalf("read after the writer closed: %q %v", got, err)
	}
	if _, err := b.Write([]byte("x")); err == nil {
		t.Fatal("a write to a closed end succeeded")
	}

	a, b = newPipePair()
	_ = b.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := b.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("read past its deadline: %v", err)
	}
	_ = a.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	if n, err := a.Write(make([]byte, pipeBuffer+1)); n != pipeBuffer || !isTimeout(err) {
		t.Fatalf("write into a full buffer: %d %v", n, err)
	}
	_ = b.SetReadDeadline(time.Time{})
	if n, err := io.ReadFull(b, make([]byte, pipeBuffer)); n != pipeBuffer || err != nil {
		t.Fatalf("reading the full buffer: %d %v", n, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(interface{ Timeout() bool })
	return ok && ne.Timeout()
}
