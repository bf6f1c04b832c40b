package resp

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// step is one command of a scripted scenario: warp the frozen clock by
// warpMs first, then send args and expect want exactly (or, when prefix is
// set, a reply starting with want).
type step struct {
	warpMs int64
	args   []string
	want   string
	prefix bool
}

func cmd(args ...string) []string { return args }

// scenarioClient sends one command and returns its reply flattened as
// respwire.WithLengths writes it ("*2 [:1 :2]", "+OK", "$-1", "-ERR ..."),
// or in the client's own rendering when it has one (redis-cli).
type scenarioClient struct {
	name string
	dial func(t *testing.T, addr string) func(args []string) string
	// render turns a flattened expectation into what this client shows;
	// nil for none.
	render func(want string) string
}

// scenarioClients are the clients every scenario is played with: the raw
// RESP client, go-redis speaking RESP2 and RESP3, and the real redis-cli
// when it is installed.
func scenarioClients(t *testing.T) []scenarioClient {
	cs := []scenarioClient{
		{name: "raw", dial: func(t *testing.T, addr string) func([]string) string {
			c := rawDial(t, addr)
			return func(args []string) string { return string(c.do(t, args...)) }
		}},
	}
	for _, proto := range []int{2, 3} {
		cs = append(cs, scenarioClient{name: fmt.Sprintf("go-redis-resp%d", proto), dial: func(t *testing.T, addr string) func([]string) string {
			c := newClient(t, addr, proto)
			return func(args []string) string {
				a := make([]any, len(args))
				for i, s := range args {
					a[i] = s
				}
				v, err := c.Do(context.Background(), a...).Result()
				return flattenGoRedis(v, err)
			}
		}})
	}
	if cli, err := exec.LookPath("redis-cli"); err == nil {
		cs = append(cs, scenarioClient{name: "redis-cli", render: renderCLI, dial: func(t *testing.T, addr string) func([]string) string {
			host, port, _ := strings.Cut(addr, ":")
			return func(args []string) string {
				out, err := exec.Command(cli, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
				var exit *exec.ExitError
				if err != nil && !(errors.As(err, &exit) && len(out) > 0) { // an error reply may exit 1
					t.Fatalf("redis-cli %.60q: %v\n%s", args, err, out)
				}
				return strings.TrimRight(string(out), "\n") // an error reply ends with an empty line
			}
		}})
	} else {
		t.Log("redis-cli is not installed (.ci/run installs redis-tools): scenarios without it")
	}
	return cs
}

// flattenGoRedis renders a go-redis result as respwire.WithLengths does
// the same reply: a status or bulk string without its length (go-redis does
// not tell them apart; the scenarios use statuses only).
func flattenGoRedis(v any, err error) string {
	switch {
	case errors.Is(err, redis.Nil):
		return "$-1"
	case err != nil:
		return "-" + err.Error()
	}
	switch v := v.(type) {
	case int64:
		return fmt.Sprintf(":%d", v)
	case string:
		return "+" + v
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = flattenGoRedis(e, nil)
		}
		return fmt.Sprintf("*%d [%s]", len(v), strings.Join(parts, " "))
	}
	return fmt.Sprintf("?%T %v", v, v)
}

// renderCLI turns a flattened expectation into redis-cli's output off a
// terminal: one line per array element, integers and strings bare, a null
// as an empty line, an error as its text.
func renderCLI(want string) string {
	switch {
	case want == "$-1":
		return ""
	case strings.HasPrefix(want, "*"):
		_, inner, _ := strings.Cut(want, "[")
		inner = strings.TrimSuffix(inner, "]")
		var lines []string
		for _, f := range strings.Fields(inner) {
			// redis-cli prints a nested array's elements on lines of
			// their own, like the outer ones: drop the nesting.
			f = strings.TrimRight(strings.TrimLeft(f, "["), "]")
			if strings.HasPrefix(f, "*") {
				continue
			}
			lines = append(lines, renderCLI(f))
		}
		if strings.HasSuffix(want, " ") { // a prefix ends with its separator
			return strings.Join(lines, "\n") + "\n"
		}
		return strings.Join(lines, "\n")
	case strings.HasPrefix(want, ":"), strings.HasPrefix(want, "+"), strings.HasPrefix(want, "-"):
		return want[1:]
	}
	return want
}

// runScenario freezes a new server's clock at startMs and plays the steps
// with every scenario client, each on a server of its own.
func runScenario(t *testing.T, startMs int64, steps []step) {
	t.Helper()
	for _, sc := range scenarioClients(t) {
		t.Run(sc.name, func(t *testing.T) {
			addr := debugServer(t, startMs)
			ctl := rawDial(t, addr)
			do := sc.dial(t, addr)
			for i, s := range steps {
				if s.warpMs > 0 {
					ctl.do(t, "DEBUG", "TIMEWARP", fmt.Sprint(s.warpMs)).expect(t, "+OK")
				}
				if s.args == nil {
					continue
				}
				want := s.want
				if sc.render != nil {
					want = sc.render(want)
				}
				got := do(s.args)
				if s.prefix && !strings.HasPrefix(got, want) || !s.prefix && got != want {
					t.Fatalf("step %d %v: reply %q, want %q", i, s.args, got, want)
				}
			}
		})
	}
}

// TestSpecWorkedExamples plays every worked example of the limiter commands
// (docs/commands.md, "Limiter commands") and
// redis-cell's published vectors against a frozen clock.
func TestSpecWorkedExamples(t *testing.T) {
	const minute = 60000
	hour1 := epoch2030 + 3600*1000 // 01:00:00, a minute boundary
	tests := []struct {
		name  string
		start int64
		steps []step
	}{
		{"token 4 per minute: fifth denied for 15 s", epoch2030, []step{
			{args: cmd("RL.TOKEN", "k", "4", "4/m"), want: ints(1, 4, 3, 0, 15000)},
			{args: cmd("RL.TOKEN", "k", "4", "4/m"), want: ints(1, 4, 2, 0, 30000)},
			{args: cmd("RL.TOKEN", "k", "4", "4/m"), want: ints(1, 4, 1, 0, 45000)},
			{args: cmd("RL.TOKEN", "k", "4", "4/m"), want: ints(1, 4, 0, 0, 60000)},
			{args: cmd("RL.TOKEN", "k", "4", "4/m"), want: ints(0, 4, 0, 15000, 60000)},
			{warpMs: 15000, args: cmd("RL.TOKEN", "k", "4", "4/m"), want: ints(1, 4, 0, 0, 60000)},
		}},
		{"log 2 per minute at 1:00:01, 1:00:30, 1:00:50, 1:01:40", hour1 + 1000, []step{
			{args: cmd("RL.LOG", "k", "2", "1m"), want: ints(1, 2, 1, 0, 60000)},
			{warpMs: 29000, args: cmd("RL.LOG", "k", "2", "1m"), want: ints(1, 2, 0, 0, 60000)},
			{warpMs: 20000, args: cmd("RL.LOG", "k", "2", "1m"), want: ints(0, 2, 0, 11000, 40000)},
			{warpMs: 50000, args: cmd("RL.LOG", "k", "2", "1m"), want: ints(1, 2, 1, 0, 60000)},
		}},
		{"sliding 7 per minute: 5 before, 3 now, at 30% one more", hour1, []step{
			{warpMs: 10000, args: cmd("RL.SLIDING", "k", "7", "1m", "COST", "5"), want: ints(1, 7, 2, 0, 110000)},
			{warpMs: 51000, args: cmd("RL.SLIDING", "k", "7", "1m", "COST", "3"), want: ints(1, 7, 0, 0, 119000)},
			{warpMs: 17000, args: cmd("RL.SLIDING", "k", "7", "1m"), want: ints(1, 7, 0, 0, 102000)},
			{args: cmd("RL.SLIDING", "k", "7", "1m"), want: ints(0, 7, 0, 6001, 102000)},
		}},
		{"fixed window boundary burst: 5 before and 5 after", hour1, []step{
			{warpMs: minute - 10000, args: cmd("RL.FIXED", "k", "5", "1m"), want: ints(1, 5, 4, 0, 10000)},
			{args: cmd("RL.FIXED", "k", "5", "1m"), want: ints(1, 5, 3, 0, 10000)},
			{args: cmd("RL.FIXED", "k", "5", "1m"), want: ints(1, 5, 2, 0, 10000)},
			{args: cmd("RL.FIXED", "k", "5", "1m"), want: ints(1, 5, 1, 0, 10000)},
			{args: cmd("RL.FIXED", "k", "5", "1m"), want: ints(1, 5, 0, 0, 10000)},
			{args: cmd("RL.FIXED", "k", "5", "1m"), want: ints(0, 5, 0, 10000, 10000)},
			{warpMs: 10001, args: cmd("RL.FIXED", "k", "5", "1m"), want: ints(1, 5, 4, 0, 59999)},
			{args: cmd("RL.FIXED", "k", "5", "1m"), want: ints(1, 5, 3, 0, 59999)},
			{args: cmd("RL.FIXED", "k", "5", "1m"), want: ints(1, 5, 2, 0, 59999)},
			{args: cmd("RL.FIXED", "k", "5", "1m"), want: ints(1, 5, 1, 0, 59999)},
			{args: cmd("RL.FIXED", "k", "5", "1m"), want: ints(1, 5, 0, 0, 59999)},
		}},
		{"sliding with the same numbers admits one of the second five", hour1, []step{
			{warpMs: minute - 10000, args: cmd("RL.SLIDING", "k", "5", "1m", "COST", "5"), want: ints(1, 5, 0, 0, 70000)},
			{warpMs: 10001, args: cmd("RL.SLIDING", "k", "5", "1m"), want: ints(1, 5, 0, 0, 119999)},
			{args: cmd("RL.SLIDING", "k", "5", "1m"), prefix: true, want: "*5 [:0 :5 :0 "},
			{args: cmd("RL.SLIDING", "k", "5", "1m"), prefix: true, want: "*5 [:0 :5 :0 "},
			{args: cmd("RL.SLIDING", "k", "5", "1m"), prefix: true, want: "*5 [:0 :5 :0 "},
			{args: cmd("RL.SLIDING", "k", "5", "1m"), prefix: true, want: "*5 [:0 :5 :0 "},
		}},
		{"redis-cell: 15 30 60 on a new key", epoch2030, []step{
			{args: cmd("CL.THROTTLE", "user123", "15", "30", "60"), want: ints(0, 16, 15, -1, 2)},
		}},
		{"redis-cell: 0 1 2 1 twice", epoch2030, []step{
			{args: cmd("CL.THROTTLE", "k", "0", "1", "2", "1"), want: ints(0, 1, 0, -1, 2)},
			{args: cmd("CL.THROTTLE", "k", "0", "1", "2", "1"), want: ints(1, 1, 0, 2, 2)},
		}},
		{"cost 0 peeks and changes nothing", epoch2030, []step{
			{args: cmd("RL.TOKEN", "k", "3", "1/s", "COST", "0"), want: ints(1, 3, 3, 0, 0)},
			{args: cmd("EXISTS", "k"), want: ":0"},
			{args: cmd("RL.TOKEN", "k", "3", "1/s", "COST", "2"), want: ints(1, 3, 1, 0, 2000)},
			{args: cmd("RL.TOKEN", "k", "3", "1/s", "cost", "0"), want: ints(1, 3, 1, 0, 2000)},
			{args: cmd("RL.PEEK", "k"), want: ints(1, 3, 1, 0, 2000)},
			{args: cmd("RL.TOKEN", "k", "3", "1/s", "COST", "4"), want: ints(0, 3, 1, -1, 2000)},
			{args: cmd("PTTL", "k"), want: ":2000"},
			{args: cmd("TTL", "k"), want: ":2"},
			{args: cmd("TYPE", "k"), want: "+token"},
			{warpMs: 2000, args: cmd("EXISTS", "k"), want: ":0"},
			{args: cmd("RL.PEEK", "k"), want: "$-1"},
			{args: cmd("PTTL", "k"), want: ":-2"},
		}},
		{"leaky bucket fills and drains", epoch2030, []step{
			{args: cmd("RL.LEAKY", "k", "2", "1/s"), want: ints(1, 2, 1, 0, 1000)},
			{args: cmd("RL.LEAKY", "k", "2", "1/s"), want: ints(1, 2, 0, 0, 2000)},
			{args: cmd("RL.LEAKY", "k", "2", "1/s"), want: ints(0, 2, 0, 1000, 2000)},
			{warpMs: 500, args: cmd("RL.LEAKY", "k", "2", "1/s"), want: ints(0, 2, 0, 500, 1500)},
			{warpMs: 500, args: cmd("RL.LEAKY", "k", "2", "1/s"), want: ints(1, 2, 0, 0, 2000)},
			{args: cmd("TYPE", "k"), want: "+leaky"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runScenario(t, tc.start, tc.steps) })
	}
}

// TestBadInput checks every error case of the grammar: a clear error, and no
// state changed.
func TestBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string // reply prefix
	}{
		{cmd("RL.TOKEN", "k", "0", "1/s"), "-ERR invalid capacity '0': must be at least 1"},
		{cmd("RL.TOKEN", "k", "abc", "1/s"), "-ERR invalid capacity 'abc'"},
		{cmd("RL.TOKEN", "k", "-5", "1/s"), "-ERR invalid capacity '-5'"},
		{cmd("RL.TOKEN", "k", "10", "0"), "-ERR invalid rate '0'"},
		{cmd("RL.TOKEN", "k", "10", "1/x"), "-ERR invalid rate '1/x'"},
		{cmd("RL.TOKEN", "k", "10", "2000000000/s"), "-ERR invalid rate '2000000000/s'"},
		{cmd("RL.LEAKY", "k", "10", "-1/s"), "-ERR invalid rate '-1/s'"},
		{cmd("RL.FIXED", "k", "5", "0"), "-ERR invalid window '0'"},
		{cmd("RL.SLIDING", "k", "5", "367d"), "-ERR invalid window '367d'"},
		{cmd("RL.LOG", "k", "0", "1m"), "-ERR invalid limit '0': must be at least 1"},
		{cmd("RL.LOG", "k", "100001", "1m"), "-ERR invalid limit '100001': exceeds max-log-limit 100000"},
		{cmd("RL.TOKEN", "k", "10", "1/s", "COST"), "-ERR option COST needs a value"},
		{cmd("RL.TOKEN", "k", "10", "1/s", "COST", "-0"), "-ERR invalid cost '-0'"},
		{cmd("RL.TOKEN", "k", "10", "1/s", "COST", "--1"), "-ERR invalid cost '--1'"},
		{cmd("RL.TOKEN", "k", "10", "1/s", "COST", "+1"), "-ERR invalid cost '+1'"},
		{cmd("RL.TOKEN", "k", "10", "1/s", "COST", "-9007199254740993"), "-ERR invalid cost '-9007199254740993'"},
		{cmd("RL.TOKEN", "k", "10", "1/s", "COST", "9007199254740993"), "-ERR invalid cost '9007199254740993'"},
		{cmd("RL.TOKEN", "k", "10", "1/s", "FOO", "1"), "-ERR unknown option 'FOO' for 'rl.token': expected COST n"},
		{cmd("RL.TOKEN", "k", "10"), "-ERR wrong number of arguments for 'rl.token' command"},
		{cmd("RL.TOKEN", "", "10", "1/s"), "-ERR invalid key '': must be 1 to 1024 bytes"},
		{cmd("RL.TOKEN", strings.Repeat("x", 1025), "10", "1/s"), "-ERR invalid key: longer than 1024 bytes"},
		{cmd("CL.THROTTLE", "k", "15", "0", "60"), "-ERR Zero rates are not supported"},
		{cmd("CL.THROTTLE", "k", "15", "30", "0"), "-ERR Zero rates are not supported"},
		{cmd("CL.THROTTLE", "k", "-1", "30", "60"), "-ERR invalid max_burst '-1'"},
		{cmd("CL.THROTTLE", "k", "15", "30", "60", "-2"), "-ERR invalid quantity '-2'"},
		{cmd("CL.THROTTLE", "k", "15", "30", "60", "1", "2"), "-ERR wrong number of arguments for 'cl.throttle' command"},
		{cmd("CL.THROTTLE", "k", "15", "30", "31622401"), "-ERR invalid period '31622401'"},
		{cmd("NOPE", "a", "b"), "-ERR unknown command 'NOPE', with args beginning with: 'a' 'b' "},
		{cmd("SELECT", "1"), "-ERR DB index is out of range"},
		{cmd("DEBUG", "TIMEWARP", "10"), "-ERR DEBUG command not allowed"},
		{cmd("CLIENT", "FOO"), "-ERR unknown subcommand 'FOO'. Try CLIENT HELP."},
		{cmd("AUTH", "x"), "-ERR AUTH <password> called without any password configured"},
		{cmd("HELLO", "4"), "-NOPROTO unsupported protocol version"},
		{cmd("SCAN", "x"), "-ERR invalid cursor"},
		{cmd("FLUSHALL", "NOW"), "-ERR syntax error"},
	}
	for _, sc := range scenarioClients(t) {
		t.Run(sc.name, func(t *testing.T) {
			addr := startServer(t, Config{})
			do := sc.dial(t, addr)
			for _, tc := range tests {
				want := tc.want
				if sc.render != nil {
					want = sc.render(want)
				}
				if got := do(tc.args); !strings.HasPrefix(got, want) {
					t.Errorf("%.60q: reply %q, want prefix %q", tc.args, got, want)
				}
			}
			rawDial(t, addr).do(t, "DBSIZE").expect(t, ":0")
		})
	}
}

// TestWrongType: another algorithm on a key is WRONGTYPE and changes nothing,
// peeks included.
func TestWrongType(t *testing.T) {
	const wrongType = "-WRONGTYPE Operation against a key holding the wrong kind of limiter"
	steps := []step{{args: cmd("RL.TOKEN", "k", "10", "1/s"), want: ints(1, 10, 9, 0, 1000)}}
	for _, args := range [][]string{
		{"RL.FIXED", "k", "5", "1m"},
		{"RL.LEAKY", "k", "10", "1/s", "COST", "0"},
		{"RL.SLIDING", "k", "5", "1m"},
		{"RL.LOG", "k", "5", "1m"},
		{"CL.THROTTLE", "k", "15", "30", "60"},
	} {
		steps = append(steps, step{args: args, want: wrongType})
	}
	steps = append(steps,
		step{args: cmd("RL.PEEK", "k"), want: ints(1, 10, 9, 0, 1000)},
		step{args: cmd("TYPE", "k"), want: "+token"})
	runScenario(t, epoch2030, steps)
}
