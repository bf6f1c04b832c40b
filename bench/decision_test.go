package bench

import (
	"bufio"
	"net"
	"strings"
	"testing"
)

// replayConn is a net.Conn whose reads return the same bytes over and over:
// a server that answers every pipelined command with one reply.
type replayConn struct {
	net.Conn
	data []byte
	off  int
}

func (r *replayConn) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m := copy(p[n:], r.data[r.off:])
		n += m
		r.off = (r.off + m) % len(r.data)
	}
	return n, nil
}

// BenchmarkReadDecision measures the load loop's reply reader on the
// replies it meets most: a limiter decision (sluice's array), an integer
// (the Lua scripts'), a bulk string (the echo ceiling) and an error. It
// must not allocate, but for the error's text.
func BenchmarkReadDecision(b *testing.B) {
	for _, bc := range []struct{ name, reply string }{
		{"array", "*5\r\n:1\r\n:10\r\n:9\r\n:0\r\n:100\r\n"},
		{"integer", ":1\r\n"},
		{"bulk", "$16\r\nrl:bench:key:123\r\n"},
		{"error", "-WRONGTYPE Operation against a key holding the wrong kind of limiter\r\n"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rd := bufio.NewReader(&replayConn{data: []byte(bc.reply)})
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.reply)))
			for b.Loop() {
				if _, err := readDecision(rd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestReadDecisionAllocates nothing for a decision, an integer or a bulk
// string.
func TestReadDecisionAllocatesNothing(t *testing.T) {
	for _, reply := range []string{
		"*5\r\n:1\r\n:10\r\n:9\r\n:0\r\n:100\r\n",
		":0\r\n",
		"$4\r\nPONG\r\n",
		"*3\r\n:1\r\n$3\r\nabc\r\n*2\r\n+x\r\n%1\r\n+k\r\n:2\r\n",
	} {
		rd := bufio.NewReader(&replayConn{data: []byte(reply)})
		if n := testing.AllocsPerRun(1000, func() {
			if _, err := readDecision(rd); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%q: %v allocations per reply, want 0", reply, n)
		}
	}
}

// TestReadDecisions: every shape of reply the decision reader must read
// or pass over, in a row.
func TestReadDecisions(t *testing.T) {
	wire := "*5\r\n:1\r\n:10\r\n:9\r\n:0\r\n:100\r\n" + "*5\r\n:0\r\n:10\r\n:0\r\n:1500\r\n:6000\r\n" +
		":1\r\n" + ":0\r\n" + "-WRONGTYPE Operation against a key holding the wrong kind of limiter\r\n" +
		"*3\r\n:1\r\n$3\r\nabc\r\n*2\r\n+x\r\n%1\r\n+k\r\n:2\r\n" + "$4\r\nPONG\r\n" + "$-1\r\n"
	want := []Decision{
		{Allowed: 1}, {Allowed: 0}, {Allowed: 1}, {Allowed: 0},
		{Err: true, Msg: "WRONGTYPE Operation against a key holding the wrong kind of limiter"},
		{Allowed: 1}, {Allowed: 1}, {Allowed: 0},
	}
	rd := bufio.NewReader(strings.NewReader(wire))
	for i, w := range want {
		if d, err := readDecision(rd); err != nil || d != w {
			t.Errorf("reply %d: %+v, %v; want %+v", i, d, err, w)
		}
	}
	for _, bad := range []string{"?what\r\n", ":12x\r\n", "*x\r\n", "$3\r\nabcd\r\n"} {
		if _, err := readDecision(bufio.NewReader(strings.NewReader(bad))); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
