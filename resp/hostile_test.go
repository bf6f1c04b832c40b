package resp

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit"
)

// TestHostileFramingThroughServer sends framings that crash or spin a bare
// redcon server to the full server: each gets its protocol error and a
// closed connection, and the server keeps answering everyone else.
func TestHostileFramingThroughServer(t *testing.T) {
	addr := startServer(t, Config{})
	tests := []struct {
		name, data, want string
	}{
		{"bulk length 2^63-1", "*1\r\n$9223372036854775807\r\n", "-ERR Protocol error: invalid bulk length"},
		{"multibulk 2^63-1", "*9223372036854775807\r\n", "-ERR Protocol error: invalid multibulk length"},
		{"bulk over 1 MiB", "*2\r\n$4\r\nPING\r\n$2000000\r\n", "-ERR Protocol error: invalid bulk length"},
		{"inline line that never ends", strings.Repeat("A", 70<<10), "-ERR Protocol error: too big inline request"},
		{"not a bulk", "*1\r\n+PING\r\n", "-ERR Protocol error: expected '$', got '+'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := rawDial(t, addr)
			c.send(t, encode("PING")+tc.data)
			c.read(t).expect(t, "+PONG")
			got := string(c.read(t))
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("reply %q, want %q", got, tc.want)
			}
			_ = c.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.rd.ReadByte(); err != io.EOF {
				t.Fatalf("connection still open after a protocol error (err %v)", err)
			}
			other := rawDial(t, addr)
			other.do(t, "PING").expect(t, "+PONG")
		})
	}
}

// TestMaxClients refuses the connection past --maxclients with Redis's error.
func TestMaxClients(t *testing.T) {
	addr := startServer(t, Config{MaxClients: 2})
	a, b := rawDial(t, addr), rawDial(t, addr)
	a.do(t, "PING").expect(t, "+PONG")
	b.do(t, "PING").expect(t, "+PONG")
	c := rawDial(t, addr)
	c.read(t).expect(t, "-ERR max number of clients reached")
	_ = a.conn.Close()
	// The slot frees once the server notices the close.
	testkit.Eventually(t, 2*time.Second, 10*time.Millisecond, func() error {
		d := rawDial(t, addr)
		d.send(t, encode("PING"))
		if got := d.read(t); got != "+PONG" {
			return fmt.Errorf("slot never freed: %q", got)
		}
		return nil
	})
}
