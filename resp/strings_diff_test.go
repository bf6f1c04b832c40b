package resp

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/scriptdiff"
)

// rawReplyConn sends commands and reads each reply as its exact bytes
// (scriptdiff's connection, with the test's failures).
type rawReplyConn struct{ c *scriptdiff.Conn }

func dialRawReply(t testing.TB, addr string) *rawReplyConn {
	t.Helper()
	c, err := scriptdiff.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawReplyConn{c: c}
}

func (c *rawReplyConn) do(t testing.TB, args ...string) string {
	t.Helper()
	r, err := c.c.Do(args...)
	if err != nil {
		t.Fatalf("%q: %v (read %q)", args, err, r)
	}
	return r
}

// stringCommandGen draws random string commands, valid and not, for the
// differential test. Expiries are either far (at least 1000 s away), or
// already past, so that nothing expires while the test runs.
type stringCommandGen struct {
	r    *rand.Rand
	keys []string
}

func (g *stringCommandGen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }

func (g *stringCommandGen) key() string { return g.keys[g.r.IntN(len(g.keys))] }

func (g *stringCommandGen) value() string {
	return g.pick("0", "1", "-1", "10", "41", "abc", "", "007", "-0", " 1", "1.5", "+1",
		"9223372036854775807", "-9223372036854775808", "9223372036854775806", "-9223372036854775807",
		"99999999999999999999", strconv.Itoa(g.r.IntN(1000)))
}

func (g *stringCommandGen) intArg() string {
	return g.pick("1", "5", "-3", "0", "100", "x", "1.0", "9223372036854775807", "-9223372036854775808",
		"9223372036854775806", "", "+2", "01")
}

// seconds and millis are relative expiry arguments.
func (g *stringCommandGen) seconds() string {
	return g.pick("1000", "5000", "86400", "0", "-5", "abc", "9223372036854775", "9223372036854776",
		"9223372036854775807", strconv.Itoa(1000+g.r.IntN(100000)))
}

func (g *stringCommandGen) millis() string {
	return g.pick("1000000", "5000000", "0", "-5", "x", "9223372036854775807", "9223372036854775000",
		strconv.Itoa(1_000_000+g.r.IntN(100_000_000)))
}

func (g *stringCommandGen) unixSecs() string {
	return g.pick("1", "4102444800", "4102444801", "0", "-1", "9223372036854775", "9223372036854776", "y")
}

func (g *stringCommandGen) unixMillis() string {
	return g.pick("1", "4102444800000", "4102444800123", "0", "-1", "9223372036854775807", "y")
}

// setOptions draws SET's or GETEX's options in any order and case.
func (g *stringCommandGen) options(forSet bool) []string {
	var out []string
	for range g.r.IntN(4) {
		switch g.r.IntN(10) {
		case 0:
			out = append(out, g.pick("NX", "nx", "Nx"))
		case 1:
			out = append(out, g.pick("XX", "xx"))
		case 2:
			out = append(out, g.pick("GET", "get"))
		case 3:
			out = append(out, g.pick("EX", "ex"), g.seconds())
		case 4:
			out = append(out, g.pick("PX", "pX"), g.millis())
		case 5:
			out = append(out, g.pick("EXAT", "exat"), g.unixSecs())
		case 6:
			out = append(out, g.pick("PXAT", "pxat"), g.unixMillis())
		case 7:
			out = append(out, g.pick("KEEPTTL", "keepttl"))
		case 8:
			out = append(out, g.pick("PERSIST", "persist"))
		case 9:
			out = append(out, g.pick("EX", "PX", "FOO", "NXX", "GETT"))
		}
	}
	if forSet && g.r.IntN(10) == 0 {
		out = append(out, "EX") // a trailing option without its argument
	}
	return out
}

func (g *stringCommandGen) expireOptions() []string {
	var out []string
	for range g.r.IntN(3) {
		out = append(out, g.pick("NX", "xx", "GT", "lt", "nx", "BAD"))
	}
	return out
}

// next draws one command; onLimiter says whether it is aimed at the key
// holding another type (a limiter in sluice, a list in Redis).
func (g *stringCommandGen) next(limKey string) []string {
	k := g.key()
	switch g.r.IntN(28) {
	case 0, 1:
		return []string{"GET", k}
	case 2, 3:
		return append([]string{g.pick("SET", "set"), k, g.value()}, g.options(true)...)
	case 4:
		return []string{"SETNX", k, g.value()}
	case 5:
		return []string{"SETEX", k, g.seconds(), g.value()}
	case 6:
		return []string{"PSETEX", k, g.millis(), g.value()}
	case 7:
		return []string{"GETSET", k, g.value()}
	case 8:
		return []string{"GETDEL", k}
	case 9:
		return append([]string{"GETEX", k}, g.options(false)...)
	case 10:
		return []string{"MGET", k, g.key(), limKey, g.key()}
	case 11:
		return []string{"STRLEN", k}
	case 12, 13:
		return []string{"INCR", k}
	case 14:
		return []string{"DECR", k}
	case 15, 16:
		return []string{"INCRBY", k, g.intArg()}
	case 17:
		return []string{"DECRBY", k, g.intArg()}
	case 18:
		return append([]string{"EXPIRE", k, g.seconds()}, g.expireOptions()...)
	case 19:
		return append([]string{"PEXPIRE", k, g.millis()}, g.expireOptions()...)
	case 20:
		return append([]string{"EXPIREAT", k, g.unixSecs()}, g.expireOptions()...)
	case 21:
		return append([]string{"PEXPIREAT", k, g.unixMillis()}, g.expireOptions()...)
	case 22:
		return []string{"PERSIST", k}
	case 23:
		return []string{g.pick("TTL", "PTTL"), k}
	case 24:
		return []string{g.pick("EXPIRETIME", "PEXPIRETIME"), k}
	case 25:
		return []string{g.pick("EXISTS", "TYPE", "DEL", "UNLINK"), k}
	case 26:
		// Commands Redis refuses on a key of another type alike.
		return append([]string{g.pick("GET", "INCR", "STRLEN", "GETDEL", "GETSET", "SET", "SETNX", "GETEX", "DECRBY")}, limKey)
	}
	// Wrong numbers of arguments.
	return []string{g.pick("GET", "SET", "SETNX", "SETEX", "INCRBY", "EXPIRE", "MGET", "GETEX", "STRLEN", "PERSIST", "TTL")}
}

// completeLimiterCommand gives the arguments a limiter-key command drawn by
// next lacks.
func completeLimiterCommand(args []string, g *stringCommandGen) []string {
	switch strings.ToUpper(args[0]) {
	case "GETSET", "SETNX":
		return append(args, g.value())
	case "SET":
		return append(args, g.value(), g.pick("GET", "NX", "NX GET"))
	case "DECRBY":
		return append(args, "1")
	}
	return args
}

// timeConditioned reports whether args is an EXPIRE-family command with GT
// or LT: whether it sets depends on the milliseconds that passed since the
// expiry it compares with was set, which differ between the two servers.
func timeConditioned(args []string) bool {
	if len(args) < 3 || !strings.Contains(strings.ToUpper(args[0]), "EXPIRE") {
		return false
	}
	for _, a := range args[2:] {
		if u := strings.ToUpper(a); u == "GT" || u == "LT" {
			return true
		}
	}
	return false
}

// sameLoosely accepts integer replies of time commands that differ by the
// few milliseconds between the two servers' clocks, and either answer of a
// time-conditioned EXPIRE (the expiries then stay milliseconds apart).
func sameLoosely(args []string, a, b string) bool {
	cmd := args[0]
	if a == b {
		return true
	}
	if timeConditioned(args) && (a == ":0\r\n" || a == ":1\r\n") && (b == ":0\r\n" || b == ":1\r\n") {
		return true
	}
	switch strings.ToUpper(cmd) {
	case "PTTL", "PEXPIRETIME", "TTL", "EXPIRETIME":
	default:
		return false
	}
	x, err1 := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(a, ":"), "\r\n"), 10, 64)
	y, err2 := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(b, ":"), "\r\n"), 10, 64)
	if err1 != nil || err2 != nil || x < 0 || y < 0 {
		return false
	}
	d := x - y
	return d >= -2000 && d <= 2000 && (strings.HasPrefix(strings.ToUpper(cmd), "P") || d >= -2 && d <= 2)
}

// diffPair is a connection to redis-server and one to sluice that the
// differential tests send the same commands to.
type diffPair struct{ redis, sluice *rawReplyConn }

// dialDiffPairs connects to both servers over RESP2 (the map's 2) and
// RESP3 (its 3).
func dialDiffPairs(t *testing.T, redisAddr, sluiceAddr string) map[int]diffPair {
	conns := map[int]diffPair{}
	for _, proto := range []int{2, 3} {
		p := diffPair{dialRawReply(t, redisAddr), dialRawReply(t, sluiceAddr)}
		if proto == 3 {
			p.redis.do(t, "HELLO", "3")
			p.sluice.do(t, "HELLO", "3")
		}
		conns[proto] = p
	}
	return conns
}

// sameBlock sends a transaction's commands to both, in order, and fails
// at the first reply that differs by a byte; history records each.
func (p diffPair) sameBlock(t *testing.T, seed uint64, step int, block [][]string, history *[]string) {
	t.Helper()
	for _, a := range block {
		want, got := p.redis.do(t, a...), p.sluice.do(t, a...)
		*history = append(*history, fmt.Sprintf("%q -> %q", a, want))
		if got != want {
			t.Fatalf("seed %d step %d: in %q: %q\nsluice: %q\nredis:  %q", seed, step, block, a, got, want)
		}
	}
}

// same sends args to both and fails unless the replies agree
// (sameLoosely), logging the last 40 steps of history first.
func (p diffPair) same(t *testing.T, seed uint64, step int, args []string, history *[]string) {
	t.Helper()
	want := p.redis.do(t, args...)
	got := p.sluice.do(t, args...)
	*history = append(*history, fmt.Sprintf("%q -> %q", args, want))
	if !sameLoosely(args, got, want) {
		for _, h := range (*history)[max(0, len(*history)-40):] {
			t.Log(h)
		}
		t.Fatalf("seed %d step %d: %q\nsluice: %q\nredis:  %q", seed, step, args, got, want)
	}
}

// TestStringsDifferential runs random sequences of the string commands on
// sluice and on a real redis-server, over RESP2 and RESP3 connections, some
// in MULTI/EXEC, and requires the same replies byte for byte (time replies
// within the few milliseconds between the two servers' clocks).
func TestStringsDifferential(t *testing.T) {
	redisAddr := scriptdiff.StartRedis(t)
	sluiceAddr := startServer(t, Config{EnableDebug: true})
	conns := dialDiffPairs(t, redisAddr, sluiceAddr)
	const limKey = "lim"
	for seed := range uint64(4) {
		g := &stringCommandGen{r: rand.New(rand.NewPCG(seed, 26)), keys: []string{"a", "b", "c", "{a}d"}}
		conns[2].redis.do(t, "FLUSHALL")
		conns[2].sluice.do(t, "FLUSHALL")
		var history []string
		for step := range 1500 {
			if step%100 == 0 {
				// A key of another type: a list in Redis, a limiter in sluice.
				conns[2].redis.do(t, "DEL", limKey)
				conns[2].redis.do(t, "RPUSH", limKey, "x")
				conns[2].sluice.do(t, "DEL", limKey)
				// RL.TOKEN 5 1/h stays live for an hour: the test never sees it reset.
				if r := conns[2].sluice.do(t, "RL.TOKEN", limKey, "5", "1/h"); !strings.HasPrefix(r, "*5") {
					t.Fatalf("RL.TOKEN: %q", r)
				}
			}
			args := g.next(limKey)
			if len(args) == 2 && args[1] == limKey {
				args = completeLimiterCommand(args, g)
				if len(args) == 4 && args[3] == "NX GET" {
					args = append(args[:3], "NX", "GET")
				}
			}
			c := conns[2+g.r.IntN(2)]
			if g.r.IntN(30) == 0 {
				// A transaction: its replies, QUEUED and EXEC's array (or
				// EXECABORT), byte for byte. Time replies are left out:
				// inside an array they cannot be compared loosely.
				block := [][]string{{"MULTI"}}
				for len(block) < 2+g.r.IntN(4) {
					if a := g.next(limKey); !strings.Contains(strings.ToUpper(a[0]), "TTL") && !strings.Contains(strings.ToUpper(a[0]), "TIME") && !timeConditioned(a) {
						block = append(block, a)
					}
				}
				block = append(block, []string{g.pick("EXEC", "EXEC", "DISCARD")})
				c.sameBlock(t, seed, step, block, &history)
				continue
			}
			c.same(t, seed, step, args, &history)
		}
	}
}
