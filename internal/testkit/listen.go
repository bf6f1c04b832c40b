package testkit

import (
	"net"
)

// Listen listens on a free port of 127.0.0.1 for the length of the test:
// the listener is closed when the test ends.
func Listen(t TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Serve listens as Listen does and runs handle on every connection it
// accepts, each in its own goroutine, until the test ends. handle owns its
// connection (it closes it).
func Serve(t TB, handle func(c net.Conn)) net.Listener {
	t.Helper()
	ln := Listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln
}
