package servetest

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// acceptServer accepts connections until its listener is closed.
type acceptServer struct {
	mu     sync.Mutex
	ln     net.Listener
	closed bool
}

func (s *acceptServer) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		c.Close()
	}
}

func (s *acceptServer) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.ln == nil {
		return errors.New("not serving")
	}
	return s.ln.Close()
}

// TestStart: the address accepts connections while the test runs, and the
// server is closed when it ends.
func TestStart(t *testing.T) {
	srv := &acceptServer{}
	t.Run("serve", func(t *testing.T) {
		addr := Start(t, srv)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		defer c.Close()
		// the server closes what it accepts: EOF means Serve is running
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("read: %v", err)
		}
	})
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if !srv.closed {
		t.Error("the server was not closed when the test ended")
	}
}
