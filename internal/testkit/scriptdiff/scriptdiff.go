// Package scriptdiff replays, on two servers at once, the Lua scripts that
// the Redis rate limiters people run send (Spring Cloud Gateway,
// go-redis/redis_rate, rate-limiter-flexible, rate-limit-redis, Python's
// limits, APISIX, Kong, Laravel, bucket4j: their texts, sources, keys and
// arguments are in resp/testdata/scripts), each the way its library sends
// it (EVALSHA then EVAL on NOSCRIPT, SCRIPT LOAD then EVALSHA, or EVAL every
// time), with the keys and arguments it sends, in random but seeded
// sequences, and compares the two servers' replies byte for byte wherever
// they do not depend on the clock. It is the differential test of issue
// #31: the first server is a real redis-server, the second sluice (one node,
// or a cluster), whose clock the test freezes. StartRedis starts that
// redis-server for this package's tests and resp's differential tests.
//
// Redis's clock cannot be frozen, so a reply that depends on it is compared
// in a way that does not (each library's comparison says how):
//   - Scripts that take the time as an argument (limits' moving window,
//     Kong's sync, Spring's script when it is given the time, which its
//     script allows) get a logical time the sequence advances, and are
//     compared byte for byte.
//   - A remaining time in milliseconds (PTTL) that a script returns may be
//     lower on redis-server by at most the wall time the sequence has run
//     (sluice's clock stands still): that element is compared within it, the
//     others byte for byte. Every expiry is at least 1000 s away, so nothing
//     expires on redis-server while a sequence runs.
//   - Spring's script as Spring sends it (the time argument empty: the script
//     reads TIME's seconds) runs in bursts on fresh keys; a burst is compared
//     byte for byte when redis-server's TIME showed the same second before
//     and after it (the decisions then depend on no clock: every refill is 0
//     on both), and is counted as skipped otherwise.
//   - go-redis/redis_rate's GCRA reads TIME to the microsecond: its limits
//     have periods of an hour or a day, so the milliseconds a sequence runs
//     move a decision by less than a thousandth of a token; the decision and
//     the count are compared exactly (the remaining count within 1, as
//     float rounding at an exact boundary may truncate it either way), the
//     retry and reset times (text) within 2 s. sluice's frozen clock moves 1
//     ms (DEBUG TIMEWARP) before each of its calls, as a real clock would:
//     with time standing still, GCRA's float sums land on a boundary exactly.
package scriptdiff

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// Conn sends one command and returns its reply's exact bytes.
type Conn struct {
	nc net.Conn
	rd *bufio.Reader
}

// Dial connects to a RESP server at addr.
func Dial(addr string) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("scriptdiff: dial %s: %w", addr, err)
	}
	return &Conn{nc: nc, rd: bufio.NewReader(nc)}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

// Do sends args and returns the whole reply as it came.
func (c *Conn) Do(args ...string) (string, error) {
	_ = c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(respwire.AppendCommand(nil, args...)); err != nil {
		return "", fmt.Errorf("scriptdiff: send %.40q: %w", args, err)
	}
	var b strings.Builder
	if err := readRaw(c.rd, &b); err != nil {
		return b.String(), fmt.Errorf("scriptdiff: reply to %.40q: %w", args, err)
	}
	return b.String(), nil
}

// readRaw copies one whole RESP2/RESP3 reply to b.
func readRaw(rd *bufio.Reader, b *strings.Builder) error {
	line, err := rd.ReadString('\n')
	if err != nil {
		return err
	}
	b.WriteString(line)
	if len(line) < 3 {
		return fmt.Errorf("short line %q", line)
	}
	n, _ := strconv.Atoi(strings.TrimSuffix(line[1:], "\r\n"))
	switch line[0] {
	case '$', '=', '!':
		if n < 0 {
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return err
		}
		b.Write(buf)
	case '*', '~', '>':
		for range max(n, 0) {
			if err := readRaw(rd, b); err != nil {
				return err
			}
		}
	case '%', '|':
		for range 2 * n {
			if err := readRaw(rd, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// Parse reads raw (one reply's bytes) into a Value.
func Parse(raw string) (respwire.Value, error) {
	return respwire.Read(bufio.NewReader(strings.NewReader(raw)), respwire.Limits{})
}

// Scripts are the script texts by file name ("spring_request_rate_limiter.lua").
type Scripts map[string]string

// LoadScripts reads every .lua file of dir (resp/testdata/scripts).
func LoadScripts(dir string) (Scripts, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.lua"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("scriptdiff: no scripts in %s: %v", dir, err)
	}
	s := Scripts{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("scriptdiff: %w", err)
		}
		s[filepath.Base(f)] = string(b)
	}
	return s, nil
}

// SHA1 is the lowercase hex SHA1 of a script, its name in EVALSHA.
func SHA1(text string) string {
	h := sha1.Sum([]byte(text))
	return hex.EncodeToString(h[:])
}

// Sending is how a library sends its scripts.
type Sending int

const (
	// EvalshaEval: EVALSHA, then EVAL on NOSCRIPT (Spring Data Redis,
	// go-redis Script.Run, ioredis defineCommand, APISIX's lua-resty-redis).
	EvalshaEval Sending = iota
	// EvalshaLoad: EVALSHA, then on NOSCRIPT SCRIPT LOAD and EVALSHA again
	// (redis-py's register_script).
	EvalshaLoad
	// LoadEvalsha: SCRIPT LOAD once first, then EVALSHA; on NOSCRIPT SCRIPT
	// LOAD and EVALSHA again (rate-limit-redis).
	LoadEvalsha
	// EvalOnly: EVAL every time (Kong, Laravel, bucket4j).
	EvalOnly
)

// Call is one script call as the library makes it, or (Script empty) one
// plain command of the library (Cmd).
type Call struct {
	Script string
	Keys   []string
	Args   []string
	Cmd    []string
	// Compare, when set, compares the two replies of the script call
	// (redis-server's first) given the wall time the sequence has run;
	// otherwise they must be equal byte for byte.
	Compare func(redis, sluice string, elapsed time.Duration) error
	// MayFail marks a call whose script stops with an error (the error
	// path of a library's script): its reply is compared like any other.
	MayFail bool
}

// Step is what the sequence does next: a few calls.
type Step struct {
	Calls []Call
	// SameSecond marks a burst whose replies depend on TIME's seconds: it is
	// compared only when redis-server's TIME shows one second before and
	// after it (see the package comment).
	SameSecond bool
}

// Library is one limiter's way of calling its scripts.
type Library struct {
	Name string
	Send Sending
	// Load are the scripts a LoadEvalsha library loads first.
	Load []string
	// RESP3 says the library's usual client speaks RESP3 (Lettuce, which
	// Spring Data Redis uses, and go-redis v9 say HELLO 3): the run's
	// connections do too.
	RESP3 bool
	// TimeWarp makes the sluice side's frozen clock move 1 ms before each
	// script call (scripts that read TIME to the microsecond).
	TimeWarp bool
	// Start begins a sequence and returns what draws its next step; now is
	// the sequence's logical time in milliseconds (it starts at Epoch),
	// which the step may advance.
	Start func() func(r *rand.Rand, now *int64) Step
}

// Epoch is where the logical clock starts and where the sluice side's
// clock is frozen: 2030-01-01T00:00:00Z in milliseconds.
const Epoch = int64(1893456000000)

// Side is one server of the comparison with the library's memory of the
// scripts it loaded.
type Side struct {
	Name string
	Conn *Conn
	// Sluice marks the side whose clock the test freezes and warps.
	Sluice bool
}

// Options are a run's sizes.
type Options struct {
	Seeds uint64 // sequences, each from its own seed
	Steps int    // steps per sequence
	// FlushEvery is the chance (1 in FlushEvery) that a step first sends
	// SCRIPT FLUSH to both servers, so that the libraries meet NOSCRIPT; 0
	// never.
	FlushEvery int
	// Flush empties both servers' keys between sequences (FLUSHALL).
	Flush bool
	// Cluster says the second server is a cluster with several groups,
	// each of which keeps the scripts EVAL loads on its own keys, as each
	// master of a Redis Cluster does: a library may meet NOSCRIPT there
	// (and fall back) where the single redis-server had the script; the
	// fallback's replies are checked for their form, and the call's own
	// reply compared.
	Cluster bool
}

// RunLibraries plays every library (Libraries(opts.Cluster)) with opts,
// each as a subtest of t, on the redis-server at redisAddr and sluice at
// sluiceAddr, the scripts read from scriptsDir (LoadScripts), and logs
// what each compared.
func RunLibraries(t *testing.T, scriptsDir, redisAddr, sluiceAddr string, opts Options) {
	t.Helper()
	scripts, err := LoadScripts(scriptsDir)
	if err != nil {
		t.Fatal(err)
	}
	dial := func(addr string) *Conn {
		c, err := Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	redisSide := &Side{Name: "redis-server", Conn: dial(redisAddr)}
	sluiceSide := &Side{Name: "sluice", Conn: dial(sluiceAddr), Sluice: true}
	for _, lib := range Libraries(opts.Cluster) {
		t.Run(lib.Name, func(t *testing.T) {
			rep := Run(t, scripts, lib, redisSide, sluiceSide, opts)
			t.Logf("%d calls compared, %d bursts skipped (a second of redis-server's clock passed), %d calls met NOSCRIPT in a group only",
				rep.Calls, rep.Skipped, rep.ExtraNoscript)
		})
	}
}

// Report counts what a run compared.
type Report struct {
	Calls, Skipped int
	// ExtraNoscript counts the calls that met NOSCRIPT on one side only
	// (Options.Cluster).
	ExtraNoscript int
}

// Run plays lib's sequences on a (redis-server) and b (sluice, or a second
// redis-server, as this package's own tests run it) and fails t at the
// first reply that differs, with the history before it.
func Run(t testing.TB, scripts Scripts, lib Library, a, b *Side, opt Options) Report {
	t.Helper()
	var rep Report
	if b.Sluice {
		// Frozen at Epoch, or where it stands when an earlier run moved it
		// past Epoch (the clock never goes back).
		if r, err := b.Conn.Do("DEBUG", "CLOCK", "FREEZE", strconv.FormatInt(Epoch, 10)); err != nil || r != "+OK\r\n" {
			mustOK(t, b, "DEBUG", "CLOCK", "FREEZE")
		}
	}
	if lib.RESP3 {
		for _, s := range []*Side{a, b} {
			if r, err := s.Conn.Do("HELLO", "3"); err != nil || !strings.HasPrefix(r, "%") {
				t.Fatalf("%s: HELLO 3: %q %v", s.Name, r, err)
			}
		}
		defer func() {
			for _, s := range []*Side{a, b} {
				_, _ = s.Conn.Do("HELLO", "2")
			}
		}()
	}
	for seed := range opt.Seeds {
		r := rand.New(rand.NewPCG(seed, 31))
		if opt.Flush {
			for _, s := range []*Side{a, b} {
				if _, err := s.Conn.Do("FLUSHALL"); err != nil {
					t.Fatal(err)
				}
			}
		}
		ra, rb := &runner{t: t, side: a, scripts: scripts}, &runner{t: t, side: b, scripts: scripts}
		for _, name := range lib.Load {
			ra.load(name)
			rb.load(name)
		}
		now := Epoch
		next := lib.Start()
		start := time.Now()
		var history []string
		fail := func(format string, args ...any) {
			t.Helper()
			for _, h := range history[max(0, len(history)-30):] {
				t.Log(h)
			}
			t.Fatalf("%s seed %d: "+format, append([]any{lib.Name, seed}, args...)...)
		}
		for step := range opt.Steps {
			if opt.FlushEvery > 0 && r.IntN(opt.FlushEvery) == 0 {
				x, y := ra.do("SCRIPT", "FLUSH"), rb.do("SCRIPT", "FLUSH")
				history = append(history, "SCRIPT FLUSH -> "+x)
				if x != y {
					fail("step %d: SCRIPT FLUSH: %s %q, %s %q", step, a.Name, x, b.Name, y)
				}
			}
			st := next(r, &now)
			var sec string
			if st.SameSecond {
				sec = ra.second()
			}
			type pair struct {
				call Call
				x, y []string
			}
			var got []pair
			for _, c := range st.Calls {
				if lib.TimeWarp && b.Sluice && c.Script != "" {
					mustOK(t, b, "DEBUG", "TIMEWARP", "1")
				}
				x, y := ra.call(lib.Send, c), rb.call(lib.Send, c)
				got = append(got, pair{c, x, y})
			}
			if st.SameSecond && ra.second() != sec {
				rep.Skipped++
				history = append(history, fmt.Sprintf("(a burst of %d calls crossed a second of %s's clock: not compared)", len(st.Calls), a.Name))
				continue
			}
			for _, p := range got {
				what := fmt.Sprintf("%.200q", callText(p.call))
				history = append(history, fmt.Sprintf("%s -> %q", what, p.x))
				rep.Calls++
				if len(p.x) != len(p.y) && opt.Cluster && p.call.Script != "" && fallback(p.x) && fallback(p.y) {
					// One group of the cluster lacked the script the
					// single redis-server had: compare the call's replies.
					rep.ExtraNoscript++
					p.x, p.y = p.x[len(p.x)-1:], p.y[len(p.y)-1:]
				}
				if len(p.x) != len(p.y) {
					fail("step %d: %s: %d replies on %s %q, %d on %s %q", step, what, len(p.x), a.Name, p.x, len(p.y), b.Name, p.y)
				}
				if p.call.Script != "" && !p.call.MayFail && strings.HasPrefix(p.x[len(p.x)-1], "-") {
					fail("step %d: %s: %s replied an error: the sequence does not call the script as its library does", step, what, a.Name)
				}
				for i := range p.x {
					last := i == len(p.x)-1
					if last && p.call.Compare != nil {
						if err := p.call.Compare(p.x[i], p.y[i], time.Since(start)); err != nil {
							fail("step %d: %s: %v\n%s: %q\n%s: %q", step, what, err, a.Name, p.x[i], b.Name, p.y[i])
						}
						continue
					}
					if p.x[i] != p.y[i] {
						fail("step %d: %s (reply %d of %d)\n%s: %q\n%s: %q", step, what, i+1, len(p.x), a.Name, p.x[i], b.Name, p.y[i])
					}
				}
			}
		}
	}
	return rep
}

// fallback reports whether the replies before a call's last are the
// library's fallback: NOSCRIPT, then a SCRIPT LOAD's SHA1 (a 40-digit bulk
// string) or nothing.
func fallback(replies []string) bool {
	for i, r := range replies[:len(replies)-1] {
		if !(i == 0 && strings.HasPrefix(r, "-NOSCRIPT ") || i == 1 && strings.HasPrefix(r, "$40\r\n")) {
			return false
		}
	}
	return true
}

func callText(c Call) []string {
	if c.Script == "" {
		return c.Cmd
	}
	return append(append([]string{c.Script}, c.Keys...), c.Args...)
}

func mustOK(t testing.TB, s *Side, args ...string) {
	t.Helper()
	if r, err := s.Conn.Do(args...); err != nil || r != "+OK\r\n" {
		t.Fatalf("%s: %q: %q %v", s.Name, args, r, err)
	}
}

// runner sends one side's commands as the library would, remembering, as
// the library does, which scripts it believes loaded.
type runner struct {
	t       testing.TB
	side    *Side
	scripts Scripts
}

func (r *runner) do(args ...string) string {
	r.t.Helper()
	reply, err := r.side.Conn.Do(args...)
	if err != nil {
		r.t.Fatalf("%s: %v", r.side.Name, err)
	}
	return reply
}

func (r *runner) text(name string) string {
	r.t.Helper()
	s, ok := r.scripts[name]
	if !ok {
		r.t.Fatalf("no script %s", name)
	}
	return s
}

func (r *runner) load(name string) string {
	return r.do("SCRIPT", "LOAD", r.text(name))
}

// second is redis-server's TIME seconds.
func (r *runner) second() string {
	v, err := Parse(r.do("TIME"))
	if err != nil || len(v.Elems) != 2 {
		r.t.Fatalf("%s: TIME: %v %v", r.side.Name, v, err)
	}
	return v.Elems[0].Str
}

// call makes one call and returns every reply it got on the way (a
// NOSCRIPT, a SCRIPT LOAD's), the call's own last.
func (r *runner) call(send Sending, c Call) []string {
	r.t.Helper()
	if c.Script == "" {
		return []string{r.do(c.Cmd...)}
	}
	text := r.text(c.Script)
	tail := append(append([]string{strconv.Itoa(len(c.Keys))}, c.Keys...), c.Args...)
	evalsha := func() string { return r.do(append([]string{"EVALSHA", SHA1(text)}, tail...)...) }
	eval := func() string { return r.do(append([]string{"EVAL", text}, tail...)...) }
	noscript := func(reply string) bool { return strings.HasPrefix(reply, "-NOSCRIPT") }
	switch send {
	case EvalOnly:
		return []string{eval()}
	case EvalshaEval:
		first := evalsha()
		if noscript(first) {
			return []string{first, eval()}
		}
		return []string{first}
	default: // EvalshaLoad, LoadEvalsha
		first := evalsha()
		if noscript(first) {
			return []string{first, r.load(c.Script), evalsha()}
		}
		return []string{first}
	}
}

// TTLAt returns a comparison of two array replies whose elements are equal
// byte for byte except those at the given indices, remaining milliseconds,
// which may be lower on redis-server by at most the wall time elapsed (plus
// 100 ms of slack).
func TTLAt(idx ...int) func(a, b string, elapsed time.Duration) error {
	return func(a, b string, elapsed time.Duration) error {
		va, err1 := Parse(a)
		vb, err2 := Parse(b)
		if err1 != nil || err2 != nil || va.Kind != vb.Kind || len(va.Elems) != len(vb.Elems) || va.Kind != respwire.Array {
			if a == b {
				return nil
			}
			return fmt.Errorf("replies differ")
		}
		for i := range va.Elems {
			x, y := va.Elems[i], vb.Elems[i]
			loose := false
			for _, j := range idx {
				loose = loose || i == j
			}
			if !loose || x.Kind != respwire.Integer || y.Kind != respwire.Integer || x.Int < 0 || y.Int < 0 {
				if x.Text(respwire.WithLengths) != y.Text(respwire.WithLengths) {
					return fmt.Errorf("element %d differs", i+1)
				}
				continue
			}
			if d := y.Int - x.Int; d < -100 || d > elapsed.Milliseconds()+100 {
				return fmt.Errorf("element %d, a remaining time, differs by %d ms after %s", i+1, d, elapsed.Round(time.Millisecond))
			}
		}
		return nil
	}
}
