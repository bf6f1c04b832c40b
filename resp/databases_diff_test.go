package resp

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/scriptdiff"
)

// dbCommandGen draws the commands of TestDatabasesDifferential.
type dbCommandGen struct {
	r *rand.Rand
}

func (g *dbCommandGen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }
func (g *dbCommandGen) key() string              { return g.pick("a", "b", "c") }
func (g *dbCommandGen) db() string {
	if g.r.IntN(40) == 0 {
		return g.pick("16", "-1", "x", "01")
	}
	return g.pick("0", "1", "2", "3", "15")
}

// write draws a command that changes a key (or tries to).
func (g *dbCommandGen) write() []string {
	k := g.key()
	switch g.r.IntN(9) {
	case 0, 1:
		return []string{"SET", k, g.pick("1", "2.5", "x", "10")}
	case 2:
		return []string{"DEL", k}
	case 3:
		return []string{"INCR", k}
	case 4:
		return []string{"INCRBYFLOAT", k, g.pick("1.5", "0.25", "-2", "1e3", "abc")}
	case 5:
		return []string{"SET", k, "n", "NX"}
	case 6:
		return []string{"MOVE", k, g.db()}
	case 7:
		return []string{"EXPIRE", k, g.pick("100", "0")}
	}
	return []string{"PERSIST", k}
}

// next draws one command of a connection's sequence.
func (g *dbCommandGen) next() []string {
	switch g.r.IntN(16) {
	case 0, 1:
		return []string{"SELECT", g.db()}
	case 2, 3:
		return []string{"GET", g.key()}
	case 4:
		return []string{g.pick("EXISTS", "TYPE"), g.key()}
	case 5:
		return []string{"DBSIZE"}
	case 6:
		return []string{"SWAPDB", g.db(), g.db()}
	case 7:
		if g.r.IntN(4) == 0 {
			return []string{g.pick("FLUSHDB", "FLUSHALL")}
		}
		return []string{"DBSIZE"}
	}
	return g.write()
}

// TestDatabasesDifferential runs random sequences on two connections to
// sluice and to a real redis-server, switching databases, moving keys,
// swapping and flushing databases, and WATCH transactions raced by the
// other connection (a write, in any database, between WATCH and EXEC),
// and requires the same replies byte for byte.
func TestDatabasesDifferential(t *testing.T) {
	redisAddr := scriptdiff.StartRedis(t)
	sluiceAddr := startServer(t, Config{})
	type pair struct{ redis, sluice *rawReplyConn }
	var conns [2]pair
	for i := range conns {
		conns[i] = pair{dialRawReply(t, redisAddr), dialRawReply(t, sluiceAddr)}
		if i == 1 {
			conns[i].redis.do(t, "HELLO", "3")
			conns[i].sluice.do(t, "HELLO", "3")
		}
	}
	var history []string
	do := func(seed uint64, step int, c pair, args ...string) {
		t.Helper()
		want, got := c.redis.do(t, args...), c.sluice.do(t, args...)
		history = append(history, fmt.Sprintf("%q -> %q", args, want))
		if got != want {
			for _, h := range history[max(0, len(history)-40):] {
				t.Log(h)
			}
			t.Fatalf("seed %d step %d: %q\nsluice: %q\nredis:  %q", seed, step, args, got, want)
		}
	}
	for seed := range uint64(8) {
		g := &dbCommandGen{r: rand.New(rand.NewPCG(seed, 34))}
		for _, c := range conns {
			do(seed, -1, c, "SELECT", "0")
		}
		do(seed, -1, conns[0], "FLUSHALL")
		for step := range 1500 {
			c, other := conns[0], conns[1]
			if g.r.IntN(2) == 0 {
				c, other = other, c
			}
			if g.r.IntN(12) != 0 {
				do(seed, step, c, g.next()...)
				continue
			}
			// A WATCH transaction on c, raced by other.
			watch := []string{"WATCH", g.key()}
			if g.r.IntN(2) == 0 {
				watch = append(watch, g.key())
			}
			do(seed, step, c, watch...)
			if g.r.IntN(3) == 0 {
				do(seed, step, c, "SELECT", g.db())
			}
			switch g.r.IntN(6) {
			case 0, 1, 2:
				do(seed, step, other, g.write()...)
			case 3:
				do(seed, step, other, g.next()...)
			case 4:
				do(seed, step, c, g.write()...) // its own write counts too
			}
			if g.r.IntN(8) == 0 {
				do(seed, step, c, "UNWATCH")
			}
			do(seed, step, c, "MULTI")
			for range 1 + g.r.IntN(3) {
				do(seed, step, c, g.next()...)
			}
			do(seed, step, c, g.pick("EXEC", "EXEC", "EXEC", "DISCARD"))
		}
	}
}
