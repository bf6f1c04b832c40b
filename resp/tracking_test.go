package resp

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// push is the flattened invalidation push for keys (none: every key).
func push(keys ...string) string {
	if len(keys) == 0 {
		return ">2 [$10 invalidate _]"
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("$%d %s", len(k), k)
	}
	return fmt.Sprintf(">2 [$10 invalidate *%d [%s]]", len(keys), strings.Join(parts, " "))
}

// trackingConn dials addr, switches to RESP3 and turns tracking on with
// opts.
func trackingConn(t *testing.T, addr string, opts ...string) *rawConn {
	t.Helper()
	c := rawDial(t, addr)
	if r := c.do(t, "HELLO", "3"); !strings.HasPrefix(string(r), "%7") {
		t.Fatalf("HELLO 3: %s", r)
	}
	c.do(t, append([]string{"CLIENT", "TRACKING", "ON"}, opts...)...).expect(t, "+OK")
	return c
}

// expectQuiet checks that nothing is waiting on c: the next reply is
// PING's.
func (c *rawConn) expectQuiet(t *testing.T) {
	t.Helper()
	c.do(t, "PING").expect(t, "+PONG")
}

// TestTrackingInvalidates: a key read by a tracking connection with each
// tracked read is invalidated by a push, sent to the idle connection without
// it sending anything, when another connection changes it in any way; then
// it is no longer tracked until read again.
func TestTrackingInvalidates(t *testing.T) {
	addr := startServer(t, Config{EnableDebug: true})
	other := rawDial(t, addr)
	other.do(t, "DEBUG", "CLOCK", "FREEZE", fmt.Sprint(epoch2030)).expect(t, "+OK")
	a := trackingConn(t, addr)
	reads := [][]string{{"RL.PEEK"}, {"TYPE"}, {"EXISTS"}, {"PTTL"}, {"TTL"}}
	changes := []struct {
		name string
		do   []string
	}{
		{"a decision", []string{"RL.TOKEN", "k", "10", "1/s"}},
		{"a denied decision", []string{"RL.TOKEN", "k", "10", "1/s", "COST", "100"}},
		{"a reset", []string{"RL.RESET", "k"}},
		{"a delete", []string{"DEL", "k"}},
	}
	for _, read := range reads {
		for _, ch := range changes {
			other.do(t, "RL.TOKEN", "k", "10", "1/s")
			a.do(t, append(read, "k")...)
			other.do(t, ch.do...)
			if got := a.read(t); string(got) != push("k") {
				t.Fatalf("%s after %s: got %s, want %s", ch.name, read[0], got, push("k"))
			}
			// No longer tracked: another change sends nothing.
			other.do(t, "RL.TOKEN", "k", "10", "1/s")
			a.expectQuiet(t)
		}
	}
	// Reclaim at the initial state, by another connection's access.
	other.do(t, "RL.TOKEN", "r", "10", "1/s")
	a.do(t, "RL.PEEK", "r")
	other.do(t, "DEBUG", "TIMEWARP", "60000").expect(t, "+OK")
	other.do(t, "RL.PEEK", "r").expect(t, "$-1")
	if got := a.read(t); string(got) != push("r") {
		t.Fatalf("reclaim: got %s", got)
	}
	// EXISTS tracks each of its keys, even absent ones.
	a.do(t, "EXISTS", "x", "y").expect(t, ":0")
	other.do(t, "RL.FIXED", "y", "5", "1m")
	if got := a.read(t); string(got) != push("y") {
		t.Fatalf("EXISTS y: got %s", got)
	}
	// FLUSHALL invalidates every key.
	a.do(t, "TTL", "x")
	other.do(t, "FLUSHALL").expect(t, "+OK")
	if got := a.read(t); string(got) != push() {
		t.Fatalf("FLUSHALL: got %s", got)
	}
	a.expectQuiet(t)
	// A connection's own change invalidates its cache too, after the reply.
	a.do(t, "RL.PEEK", "k")
	a.do(t, "RL.TOKEN", "k", "10", "1/s")
	if got := a.read(t); string(got) != push("k") {
		t.Fatalf("own change: got %s", got)
	}
	// TRACKING OFF: nothing more.
	a.do(t, "RL.PEEK", "k")
	a.do(t, "CLIENT", "TRACKING", "OFF").expect(t, "+OK")
	other.do(t, "RL.TOKEN", "k", "10", "1/s")
	a.expectQuiet(t)
}

// TestTrackingModes: OPTIN tracks only the command after CLIENT CACHING
// YES, OPTOUT all but the one after CLIENT CACHING NO, and NOLOOP skips the
// connection's own changes.
func TestTrackingModes(t *testing.T) {
	addr := startServer(t, Config{})
	other := rawDial(t, addr)

	in := trackingConn(t, addr, "OPTIN")
	in.do(t, "RL.PEEK", "a")
	in.do(t, "CLIENT", "CACHING", "YES").expect(t, "+OK")
	in.do(t, "RL.PEEK", "b")
	in.do(t, "RL.PEEK", "c") // CACHING YES applied to the command before only
	for _, k := range []string{"a", "b", "c"} {
		other.do(t, "RL.FIXED", k, "5", "1m")
	}
	if got := in.read(t); string(got) != push("b") {
		t.Fatalf("OPTIN: got %s", got)
	}
	in.expectQuiet(t)
	// The pipelined form clients send: CACHING YES and the read together.
	in.send(t, encode("CLIENT", "CACHING", "YES")+encode("RL.PEEK", "d"))
	in.read(t).expect(t, "+OK")
	in.read(t)
	other.do(t, "RL.FIXED", "d", "5", "1m")
	if got := in.read(t); string(got) != push("d") {
		t.Fatalf("OPTIN pipelined: got %s", got)
	}

	out := trackingConn(t, addr, "OPTOUT")
	out.do(t, "CLIENT", "CACHING", "NO").expect(t, "+OK")
	out.do(t, "RL.PEEK", "e")
	out.do(t, "RL.PEEK", "f")
	other.do(t, "RL.FIXED", "e", "5", "1m")
	other.do(t, "RL.FIXED", "f", "5", "1m")
	if got := out.read(t); string(got) != push("f") {
		t.Fatalf("OPTOUT: got %s", got)
	}
	out.expectQuiet(t)

	nl := trackingConn(t, addr, "NOLOOP")
	nl.do(t, "RL.PEEK", "g")
	nl.do(t, "RL.FIXED", "g", "5", "1m")
	nl.expectQuiet(t)
	nl.do(t, "RL.PEEK", "g")
	other.do(t, "RL.FIXED", "g", "5", "1m")
	if got := nl.read(t); string(got) != push("g") {
		t.Fatalf("NOLOOP, another's change: got %s", got)
	}
	// FLUSHALL reaches NOLOOP connections too, as in Redis.
	nl.do(t, "FLUSHALL").expect(t, "+OK")
	if got := nl.read(t); string(got) != push() {
		t.Fatalf("NOLOOP FLUSHALL: got %s", got)
	}
}

// TestTrackingBounded: the table holds at most its maximum of (key,
// connection) pairs, invalidating keys beyond it, and forgets a
// connection's keys when it closes.
func TestTrackingBounded(t *testing.T) {
	tr := NewTracker(3)
	addr := startServer(t, Config{Tracker: tr})
	a := trackingConn(t, addr)
	for i := range 5 {
		a.send(t, encode("RL.PEEK", fmt.Sprint("k", i)))
	}
	a.send(t, encode("PING"))
	seen := map[string]bool{}
	nulls, pong := 0, false
	for !pong || len(seen) < 2 { // the pushes may follow PONG
		r := string(a.read(t))
		if r == "+PONG" {
			pong = true
			continue
		}
		switch {
		case r == "_":
			nulls++
		case strings.HasPrefix(r, ">2 [$10 invalidate *1 [$2 k"):
			seen[r] = true
		default:
			t.Fatalf("unexpected %s", r)
		}
	}
	if nulls != 5 {
		t.Fatalf("%d replies to 5 reads", nulls)
	}
	if len(seen) != 2 || tr.Keys() != 3 {
		t.Fatalf("%d evictions, %d pairs left", len(seen), tr.Keys())
	}
	a.conn.Close()
	testkit.Eventually(t, 5*time.Second, time.Millisecond, func() error {
		if n := tr.Keys(); n != 0 {
			return fmt.Errorf("%d pairs left after the connection closed", n)
		}
		return nil
	})
	tr.connsMu.Lock()
	conns := len(tr.conns)
	tr.connsMu.Unlock()
	if conns != 0 || tr.active.Load() != 0 {
		t.Fatalf("%d tracking connections left", conns)
	}
}

// TestTrackingConcurrent: tracking connections reading, pipelining and
// closing while others change the same keys (run with -race): every
// connection's replies stay well framed between pushes, and once they all
// closed the table is empty.
func TestTrackingConcurrent(t *testing.T) {
	tr := NewTracker(50) // small: evictions happen too
	addr := startServer(t, Config{Tracker: tr})
	errs := make(chan error, 16)
	run := func(reader bool, id int) {
		errs <- func() error {
			c, err := respwire.Dial(addr, 5*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			if reader {
				if _, err := c.Do(5*time.Second, "HELLO", "3"); err != nil {
					return err
				}
				if v, err := c.Do(5*time.Second, "CLIENT", "TRACKING", "ON"); err != nil || v.Text(respwire.WithLengths) != "+OK" {
					return fmt.Errorf("TRACKING ON: %v %v", v, err)
				}
			}
			for round := range 200 {
				var buf []byte
				for k := range 8 {
					key := fmt.Sprint("key:", (round+k+id)%40)
					if reader {
						buf = respwire.AppendCommand(buf, "RL.PEEK", key)
					} else {
						buf = respwire.AppendCommand(buf, "RL.FIXED", key, "1000", "1m")
					}
				}
				if _, err := c.Write(buf); err != nil {
					return err
				}
				for got := 0; got < 8; {
					v, err := c.ReadReply()
					if err != nil {
						return err
					}
					if v.Kind == respwire.Push {
						continue
					}
					if s := v.Text(respwire.WithLengths); !strings.HasPrefix(s, "*5 ") && s != "_" && s != "$-1" {
						return fmt.Errorf("unexpected reply %s", s)
					}
					got++
				}
			}
			return nil
		}()
	}
	for i := range 4 {
		go run(true, i)
		go run(false, i)
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 5*time.Second, time.Millisecond, func() error {
		if tr.Keys() != 0 || tr.active.Load() != 0 {
			return fmt.Errorf("%d pairs and %d tracking connections left", tr.Keys(), tr.active.Load())
		}
		return nil
	})
}

// TestTrackingStrings: GET, MGET, STRLEN, TTL, PTTL, EXISTS and TYPE of a
// string key are tracked reads, and any change of the key invalidates
// them: a write, an expiry change, a delete, and its expiry (here by a
// DEBUG TIMEWARP past it).
func TestTrackingStrings(t *testing.T) {
	addr := startServer(t, Config{EnableDebug: true})
	other := rawDial(t, addr)
	other.do(t, "DEBUG", "CLOCK", "FREEZE", fmt.Sprint(epoch2030)).expect(t, "+OK")
	a := trackingConn(t, addr)
	reads := [][]string{{"GET", "k"}, {"MGET", "x", "k"}, {"STRLEN", "k"}, {"TTL", "k"}, {"PTTL", "k"}, {"EXISTS", "k"}, {"TYPE", "k"}}
	changes := [][]string{
		{"SET", "k", "2"}, {"INCR", "k"}, {"INCRBY", "k", "5"}, {"EXPIRE", "k", "100"}, {"PEXPIRE", "k", "100", "NX"},
		{"PERSIST", "k"}, {"DEL", "k"}, {"GETDEL", "k"}, {"GETEX", "k", "EX", "9"}, {"SETEX", "k", "5", "v"},
		{"DEBUG", "TIMEWARP", "11000"},
	}
	for _, read := range reads {
		for _, ch := range changes {
			other.do(t, "SET", "k", "1", "EX", "10")
			if ch[0] == "PERSIST" || ch[1] == "k" && ch[0] == "PEXPIRE" {
				other.do(t, "PERSIST", "k")
			}
			a.do(t, read...)
			other.do(t, ch...)
			if got := a.read(t); string(got) != push("k") {
				t.Fatalf("%s after %s: got %s, want %s", ch, read, got, push("k"))
			}
			other.do(t, "SET", "k", "1")
			a.expectQuiet(t)
		}
	}
}
