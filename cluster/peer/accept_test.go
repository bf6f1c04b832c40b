package peer

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// scriptedListener answers Accept from a list: a conn, or an error.
type scriptedListener struct {
	net.Listener
	next []any
}

func (l *scriptedListener) Accept() (net.Conn, error) {
	v := l.next[0]
	l.next = l.next[1:]
	if err, ok := v.(error); ok {
		return nil, err
	}
	return v.(net.Conn), nil
}

// TestServeRetriesAndStops: Serve logs a failed Accept while open and
// accepts again, hands every connection to take, and returns when take
// refuses one or when Accept fails once closed.
func TestServeRetriesAndStops(t *testing.T) {
	c1, c2 := &net.TCPConn{}, &net.TCPConn{}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ln := &scriptedListener{next: []any{errors.New("too many open files"), c1, c2}}
	var took []net.Conn
	Serve(ln, log, "test listener", func() bool { return false }, func(c net.Conn) bool {
		took = append(took, c)
		return len(took) < 2
	})
	if len(took) != 2 || took[0] != c1 || took[1] != c2 {
		t.Fatalf("took %v, want c1 then c2", took)
	}
	if got := strings.Count(logs.String(), "test listener: accept failed"); got != 1 {
		t.Fatalf("logged %d failed accepts, want 1:\n%s", got, logs.String())
	}

	logs.Reset()
	ln = &scriptedListener{next: []any{net.ErrClosed}}
	Serve(ln, log, "test listener", func() bool { return true }, func(net.Conn) bool {
		t.Fatal("take called on a closed listener")
		return false
	})
	if logs.Len() != 0 {
		t.Fatalf("logged on close: %s", logs.String())
	}
}
