package resp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-rl/sluice/engine"
)

// epoch2030 is 2030-01-01T00:00:00Z in milliseconds: tests freeze the clock
// at or after it (the clock may not be frozen in the past).
const epoch2030 = int64(1893456000000)

// startServer runs a server over a fresh in-memory engine on 127.0.0.1:0
// and returns its address; it stops when the test ends.
func startServer(t testing.TB, cfg Config) string {
	t.Helper()
	eng := engine.New(engine.Config{Shards: 16, MaxLogLimit: cfg.MaxLogLimit})
	srv := NewServer(cfg, NewLocalExecutor(eng, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
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

// debugServer starts a server with DEBUG enabled and its clock frozen at
// freezeMs (unix milliseconds).
func debugServer(t testing.TB, freezeMs int64) string {
	t.Helper()
	addr := startServer(t, Config{EnableDebug: true})
	c := rawDial(t, addr)
	c.do(t, "DEBUG", "CLOCK", "FREEZE", fmt.Sprint(freezeMs)).expect(t, "+OK")
	return addr
}

// newClient returns a go-redis client speaking protocol proto (2 or 3).
func newClient(t testing.TB, addr string, proto int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rawConn is a minimal RESP client that returns replies as text, so tests
// can assert on exact wire bytes.
type rawConn struct {
	conn net.Conn
	rd   *bufio.Reader
}

func rawDial(t testing.TB, addr string) *rawConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rawConn{conn: conn, rd: bufio.NewReader(conn)}
}

// send writes raw bytes.
func (c *rawConn) send(t testing.TB, data string) {
	t.Helper()
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write([]byte(data)); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// encode renders a command as a RESP multibulk.
func encode(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// reply is one RESP reply flattened to text: "+OK", ":1", "$3 foo",
// "*2 [:1 :2]", "_", "%1 [...]", "-ERR ...".
type reply string

func (r reply) expect(t testing.TB, want string) {
	t.Helper()
	if string(r) != want {
		t.Fatalf("reply %q, want %q", r, want)
	}
}

func (c *rawConn) do(t testing.TB, args ...string) reply {
	t.Helper()
	c.send(t, encode(args...))
	return c.read(t)
}

// read reads one reply.
func (c *rawConn) read(t testing.TB) reply {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	r, err := readReply(c.rd)
	if err != nil {
		t.Fatalf("read reply: %v", err)
	}
	return reply(r)
}

func readReply(rd *bufio.Reader) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty line")
	}
	switch line[0] {
	case '+', '-', ':', '_', ',', '#':
		return line, nil
	case '$', '=':
		var n int
		if _, err := fmt.Sscan(line[1:], &n); err != nil {
			return "", err
		}
		if n < 0 {
			return "$-1", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(line[0]) + fmt.Sprint(n) + " " + string(buf[:n]), nil
	case '*', '%', '~':
		var n int
		if _, err := fmt.Sscan(line[1:], &n); err != nil {
			return "", err
		}
		if n < 0 {
			return "*-1", nil
		}
		count := n
		if line[0] == '%' {
			count = 2 * n
		}
		parts := make([]string, count)
		for i := range parts {
			if parts[i], err = readReply(rd); err != nil {
				return "", err
			}
		}
		return string(line[0]) + fmt.Sprint(n) + " [" + strings.Join(parts, " ") + "]", nil
	}
	return "", fmt.Errorf("unexpected reply line %q", line)
}

// ints renders integers as a flattened array reply.
func ints(vals ...int64) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = fmt.Sprintf(":%d", v)
	}
	return fmt.Sprintf("*%d [%s]", len(vals), strings.Join(parts, " "))
}
