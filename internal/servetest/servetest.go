// Package servetest serves a server on a loopback listener for the length
// of a test.
package servetest

import (
	"context"
	"net"
	"testing"
	"time"
)

// Server serves a listener until it is closed; resp.Server is one.
type Server interface {
	Serve(ln net.Listener) error
	Close(ctx context.Context) error
}

// Start serves srv on a new 127.0.0.1 listener and returns its address.
// When the test ends, srv is closed (an error, or taking over 5 seconds,
// fails the test) and Start's Serve has returned.
func Start(t testing.TB, srv Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("close server: %v", err)
		}
		<-done
	})
	return ln.Addr().String()
}
