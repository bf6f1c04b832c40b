package bench

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestAppendCommand(t *testing.T) {
	got := string(AppendCommand(nil, "RL.TOKEN", "k", "10", "1/s"))
	want := "*4\r\n$8\r\nRL.TOKEN\r\n$1\r\nk\r\n$2\r\n10\r\n$3\r\n1/s\r\n"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := string(AppendBulkInt(nil, -42)); got != "$3\r\n-42\r\n" {
		t.Fatalf("AppendBulkInt: %q", got)
	}
}

// dialReplies starts a fake server that answers each command, by its name,
// with the raw reply replies holds for it, and connects to it.
func dialReplies(t *testing.T, replies map[string]string) (*fakeServer, *Conn) {
	t.Helper()
	s := startFake(t, func(args []string) string { return replies[args[0]] })
	c, err := Dial(testCtx(t), s.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return s, c
}

func TestClientParsesEveryReplyType(t *testing.T) {
	replies := map[string]string{
		"SIMPLE":  "+OK\r\n",
		"ERR":     "-ERR invalid rate '0'\r\n",
		"INT":     ":-17\r\n",
		"BULK":    "$5\r\nhe\r\nl\r\n",
		"NILBULK": "$-1\r\n",
		"EMPTY":   "$0\r\n\r\n",
		"ARRAY":   "*5\r\n:1\r\n:10\r\n:9\r\n:0\r\n:100\r\n",
		"NESTED":  "*2\r\n*1\r\n+a\r\n$1\r\nb\r\n",
		"NILARR":  "*-1\r\n",
		"NULL3":   "_\r\n",
		"MAP3":    "%1\r\n+role\r\n+leader\r\n",
		"BOOL3":   "#t\r\n",
		"DOUBLE3": ",1.5\r\n",
	}
	_, c := dialReplies(t, replies)
	ctx := testCtx(t)

	v, err := c.Do(ctx, "SIMPLE")
	if err != nil || v.Kind != '+' || v.Str != "OK" {
		t.Errorf("SIMPLE: %+v %v", v, err)
	}
	_, err = c.Do(ctx, "ERR")
	var re ReplyError
	if !errors.As(err, &re) || string(re) != "ERR invalid rate '0'" {
		t.Errorf("ERR: %v", err)
	}
	if v, err := c.Do(ctx, "INT"); err != nil || v.Int != -17 {
		t.Errorf("INT: %+v %v", v, err)
	}
	if v, err := c.Do(ctx, "BULK"); err != nil || v.Str != "he\r\nl" {
		t.Errorf("BULK with CRLF inside: %+v %v", v, err)
	}
	if v, err := c.Do(ctx, "NILBULK"); err != nil || !v.Null {
		t.Errorf("NILBULK: %+v %v", v, err)
	}
	if v, err := c.Do(ctx, "EMPTY"); err != nil || v.Str != "" || v.Null {
		t.Errorf("EMPTY: %+v %v", v, err)
	}
	v, err = c.Do(ctx, "ARRAY")
	ints, ierr := v.Ints()
	if err != nil || ierr != nil || len(ints) != 5 || ints[0] != 1 || ints[4] != 100 {
		t.Errorf("ARRAY: %+v %v %v", ints, err, ierr)
	}
	if v, err := c.Do(ctx, "NESTED"); err != nil || v.String() != "[[a] b]" {
		t.Errorf("NESTED: %s %v", v, err)
	}
	if v, err := c.Do(ctx, "NILARR"); err != nil || !v.Null {
		t.Errorf("NILARR: %+v %v", v, err)
	}
	if v, err := c.Do(ctx, "NULL3"); err != nil || !v.Null {
		t.Errorf("NULL3: %+v %v", v, err)
	}
	if v, err := c.Do(ctx, "MAP3"); err != nil || len(v.Array) != 2 || v.Array[1].Str != "leader" {
		t.Errorf("MAP3: %+v %v", v, err)
	}
	if v, err := c.Do(ctx, "BOOL3"); err != nil || v.Int != 1 {
		t.Errorf("BOOL3: %+v %v", v, err)
	}
	if v, err := c.Do(ctx, "DOUBLE3"); err != nil || v.Str != "1.5" {
		t.Errorf("DOUBLE3: %+v %v", v, err)
	}
}

func TestClientPipelinedDecisions(t *testing.T) {
	// replies in the order of the pipelined commands: every shape the
	// decision reader must pass over
	replies := map[string]string{
		"ALLOW": "*5\r\n:1\r\n:10\r\n:9\r\n:0\r\n:100\r\n",
		"DENY":  "*5\r\n:0\r\n:10\r\n:0\r\n:1500\r\n:6000\r\n",
		"ONE":   ":1\r\n",
		"ZERO":  ":0\r\n",
		"ERR":   "-WRONGTYPE Operation against a key holding the wrong kind of limiter\r\n",
		"MIXED": "*3\r\n:1\r\n$3\r\nabc\r\n*2\r\n+x\r\n%1\r\n+k\r\n:2\r\n",
		"BULK":  "$4\r\nPONG\r\n",
		"NULL":  "$-1\r\n",
	}
	s, c := dialReplies(t, replies)
	order := []string{"ALLOW", "DENY", "ONE", "ZERO", "ERR", "MIXED", "BULK", "NULL", "ALLOW"}
	for _, cmd := range order {
		c.Append(cmd, "key")
	}
	if c.Buffered() == 0 {
		t.Fatal("nothing buffered")
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	want := []Decision{
		{Allowed: 1}, {Allowed: 0}, {Allowed: 1}, {Allowed: 0},
		{Err: true, Msg: "WRONGTYPE Operation against a key holding the wrong kind of limiter"},
		{Allowed: 1}, {Allowed: 1}, {Allowed: 0}, {Allowed: 1},
	}
	for i, w := range want {
		d, err := c.ReadDecision()
		if err != nil {
			t.Fatalf("reply %d (%s): %v", i, order[i], err)
		}
		if d != w {
			t.Errorf("reply %d (%s): %+v, want %+v", i, order[i], d, w)
		}
	}
	if got := len(s.commands()); got != len(order) {
		t.Errorf("server saw %d commands, want %d", got, len(order))
	}
}

func TestClientRejectsMalformedReplies(t *testing.T) {
	for _, raw := range []string{
		"?what\r\n",                 // unknown type
		":12x\r\n",                  // bad integer
		"+no-crlf\n",                // LF only
		"$3\r\nabcd\r\n",            // bulk longer than announced
		":99999999999999999999\r\n", // too long an integer
	} {
		srv, cli := net.Pipe()
		go func() {
			srv.Write([]byte(raw))
			srv.Close()
		}()
		c := NewConn(cli)
		_, err := c.ReadValue()
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%q: got %v, want a protocol error", raw, err)
		}
		c.Close()
	}
}

func TestClientClosedConnection(t *testing.T) {
	s := startFake(t, func(args []string) string { return "" })
	ctx := testCtx(t)
	c, err := Dial(ctx, s.addr())
	if err != nil {
		t.Fatal(err)
	}
	s.ln.Close()
	c.Close()
	if _, err := c.Do(ctx, "PING"); err == nil {
		t.Fatal("Do on a closed connection succeeded")
	}
	if _, err := Dial(ctx, s.addr()); err == nil || !strings.Contains(err.Error(), "dial") {
		t.Fatalf("Dial to a closed listener: %v", err)
	}
}
