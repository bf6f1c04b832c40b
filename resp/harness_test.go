package resp

import (
	"bufio"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/servetest"
)

// epoch2030 is 2030-01-01T00:00:00Z in milliseconds: tests freeze the clock
// at or after it (the clock may not be frozen in the past).
const epoch2030 = int64(1893456000000)

// startServer runs a server over a fresh in-memory engine on 127.0.0.1:0,
// with client tracking, and returns its address; it stops when the test
// ends.
func startServer(t testing.TB, cfg Config) string {
	t.Helper()
	if cfg.Tracker == nil {
		cfg.Tracker = NewTracker(0)
	}
	if cfg.Scripts == nil {
		cfg.Scripts = NewScriptRunner(ScriptConfig{MaxKeyLen: cfg.MaxKeyLen, MaxLogLimit: cfg.MaxLogLimit, MaxValueLen: cfg.MaxValueLen})
	}
	_, addr := serveEngine(t, cfg, engine.New(engine.Config{Stripes: 16, MaxLogLimit: cfg.MaxLogLimit, Watcher: cfg.Tracker, Scripts: cfg.Scripts}))
	return addr
}

// serveEngine runs a server over eng (cfg.Engine is set to it) on
// 127.0.0.1:0 and returns it and its address; it stops when the test ends.
func serveEngine(t testing.TB, cfg Config, eng *engine.Engine) (*Server, string) {
	t.Helper()
	cfg.Engine = eng
	srv := NewServer(cfg, NewLocalExecutor(eng, nil))
	return srv, servetest.Start(t, srv)
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
	conn *respwire.Conn
	rd   *bufio.Reader // conn's reader, for tests that read raw bytes
}

func rawDial(t testing.TB, addr string) *rawConn {
	t.Helper()
	conn, err := respwire.Dial(addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rawConn{conn: conn, rd: conn.Reader}
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
func encode(args ...string) string { return string(respwire.AppendCommand(nil, args...)) }

// reply is one RESP reply flattened to text by respwire.WithLengths:
// "+OK", ":1", "$3 foo", "*2 [:1 :2]", "_", "%1 [...]", "-ERR ...".
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
	v, err := c.conn.ReadReply()
	if err != nil {
		t.Fatalf("read reply: %v", err)
	}
	return reply(v.Text(respwire.WithLengths))
}

// ints renders integers as a flattened array reply.
func ints(vals ...int64) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = fmt.Sprintf(":%d", v)
	}
	return fmt.Sprintf("*%d [%s]", len(vals), strings.Join(parts, " "))
}
