package resp

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// allReply renders RL.ALL's flattened reply: the five combined integers,
// then one array of five per limit.
func allReply(combined [5]int64, each ...[5]int64) string {
	parts := make([]string, 0, 5+len(each))
	for _, v := range combined {
		parts = append(parts, fmt.Sprintf(":%d", v))
	}
	for _, e := range each {
		parts = append(parts, ints(e[:]...))
	}
	return fmt.Sprintf("*%d [%s]", len(parts), strings.Join(parts, " "))
}

const wrongTypeReply = "-WRONGTYPE Operation against a key holding the wrong kind of limiter"

// TestRefunds: a negative COST gives units back on each of the five RL.*
// kinds, never past the initial state, commits the call's parameters, and
// replies allowed 1 even above a lowered limit.
func TestRefunds(t *testing.T) {
	runScenario(t, epoch2030, []step{
		// TOKEN: tokens = min(capacity, tokens + n).
		{args: cmd("RL.TOKEN", "k", "10", "1/s", "COST", "5"), want: ints(1, 10, 5, 0, 5000)},
		{args: cmd("RL.TOKEN", "k", "10", "1/s", "COST", "-2"), want: ints(1, 10, 7, 0, 3000)},
		{args: cmd("RL.TOKEN", "k", "10", "1/s", "COST", "-007"), want: ints(1, 10, 10, 0, 0)},
		{args: cmd("EXISTS", "k"), want: ":0"},
		// A refund on an absent key changes nothing.
		{args: cmd("RL.TOKEN", "n", "10", "1/s", "COST", "-3"), want: ints(1, 10, 10, 0, 0)},
		{args: cmd("EXISTS", "n"), want: ":0"},
		// LEAKY: level = max(0, level - n).
		{args: cmd("RL.LEAKY", "l", "10", "1/s", "COST", "4"), want: ints(1, 10, 6, 0, 4000)},
		{args: cmd("RL.LEAKY", "l", "10", "1/s", "COST", "-1"), want: ints(1, 10, 7, 0, 3000)},
		{args: cmd("RL.LEAKY", "l", "10", "1/s", "COST", "-9007199254740992"), want: ints(1, 10, 10, 0, 0)},
		{args: cmd("EXISTS", "l"), want: ":0"},
		// FIXED: count = max(0, count - n).
		{args: cmd("RL.FIXED", "f", "5", "1m", "COST", "3"), want: ints(1, 5, 2, 0, 60000)},
		{args: cmd("RL.FIXED", "f", "5", "1m", "COST", "-1"), want: ints(1, 5, 3, 0, 60000)},
		{args: cmd("RL.FIXED", "f", "5", "1m", "COST", "-9"), want: ints(1, 5, 5, 0, 0)},
		{args: cmd("RL.PEEK", "f"), want: "$-1"},
		// SLIDING: cur = max(0, cur - n); the previous window is history.
		{args: cmd("RL.SLIDING", "s", "10", "1m", "COST", "4"), want: ints(1, 10, 6, 0, 120000)},
		{warpMs: 60000, args: cmd("RL.SLIDING", "s", "10", "1m", "COST", "2"), want: ints(1, 10, 4, 0, 120000)},
		{args: cmd("RL.SLIDING", "s", "10", "1m", "COST", "-5"), want: ints(1, 10, 6, 0, 60000)},
		// LOG: the n newest live entries go, splitting one call's units.
		{args: cmd("RL.LOG", "g", "5", "1m", "COST", "2"), want: ints(1, 5, 3, 0, 60000)},
		{warpMs: 10000, args: cmd("RL.LOG", "g", "5", "1m", "COST", "2"), want: ints(1, 5, 1, 0, 60000)},
		{args: cmd("RL.LOG", "g", "5", "1m", "COST", "-3"), want: ints(1, 5, 4, 0, 50000)},
		{args: cmd("RL.LOG", "g", "5", "1m", "COST", "-3"), want: ints(1, 5, 5, 0, 0)},
		{args: cmd("EXISTS", "g"), want: ":0"},
		// Above a lowered limit a refund still replies allowed 1, retry 0,
		// remaining 0, and stores the new limit.
		{args: cmd("RL.FIXED", "f2", "5", "1m", "COST", "5"), want: ints(1, 5, 0, 0, 50000)},
		{args: cmd("RL.FIXED", "f2", "3", "1m", "COST", "-1"), want: ints(1, 3, 0, 0, 50000)},
		// COST 0 above the lowered limit: allowed 0 until the window ends.
		{args: cmd("RL.FIXED", "f2", "3", "1m", "COST", "0"), want: ints(0, 3, 0, 50000, 50000)},
		{args: cmd("RL.PEEK", "f2"), want: ints(0, 3, 0, 50000, 50000)},
		{args: cmd("CL.THROTTLE", "c", "15", "30", "60", "-1"), want: "-ERR invalid quantity '-1': must be an integer from 0 to 9007199254740992"},
	})
}

// TestCostZeroAboveLoweredLimit: a peek replies allowed 0 with the retry
// time when the usage exceeds a lowered limit, allowed 1 when it does not.
func TestCostZeroAboveLoweredLimit(t *testing.T) {
	runScenario(t, epoch2030, []step{
		{args: cmd("RL.LOG", "g", "3", "1m", "COST", "3"), want: ints(1, 3, 0, 0, 60000)},
		{warpMs: 10000, args: cmd("RL.LOG", "g", "2", "1m", "COST", "0"), want: ints(0, 2, 0, 50000, 50000)},
		{args: cmd("RL.LOG", "g", "3", "1m", "COST", "0"), want: ints(1, 3, 0, 0, 50000)},
		{args: cmd("RL.PEEK", "g"), want: ints(1, 3, 0, 0, 50000)},
		{args: cmd("RL.LOG", "g", "2", "1m"), want: ints(0, 2, 0, 50000, 50000)},
		{args: cmd("RL.PEEK", "g"), want: ints(0, 2, 0, 50000, 50000)},
		{args: cmd("RL.SLIDING", "s", "10", "1m", "COST", "10"), want: ints(1, 10, 0, 0, 110000)},
		{args: cmd("RL.SLIDING", "s", "4", "1m", "COST", "0"), want: ints(0, 4, 0, 80001, 110000)}, // est < 5 from 30 s into the next window
		{args: cmd("RL.TOKEN", "t", "10", "1/s", "COST", "10"), want: ints(1, 10, 0, 0, 10000)},
		{args: cmd("RL.TOKEN", "t", "2", "1/s", "COST", "0"), want: ints(1, 2, 0, 0, 2000)},
	})
}

// TestAll: RL.ALL evaluates every limit at one instant and charges all of
// them or none; a denied call leaves every key as it was, parameters
// included.
func TestAll(t *testing.T) {
	runScenario(t, epoch2030, []step{
		{args: cmd("RL.ALL", "2", "TOKEN", "u:42:rpm", "60", "1/s", "1", "token", "u:42:tpm", "90000", "1500/s", "733"),
			want: allReply([5]int64{1, 60, 59, 0, 1000}, [5]int64{1, 60, 59, 0, 1000}, [5]int64{1, 90000, 89267, 0, 489})},
		{args: cmd("RL.FIXED", "a", "5", "1m", "COST", "2"), want: ints(1, 5, 3, 0, 60000)},
		{args: cmd("RL.FIXED", "b", "2", "1m", "COST", "1"), want: ints(1, 2, 1, 0, 60000)},
		// b denies: nothing changes on a or b.
		{args: cmd("RL.ALL", "2", "FIXED", "a", "5", "1m", "1", "FIXED", "b", "2", "1m", "2"),
			want: allReply([5]int64{0, 2, 1, 60000, 60000}, [5]int64{1, 5, 3, 0, 60000}, [5]int64{0, 2, 1, 60000, 60000})},
		{args: cmd("RL.PEEK", "a"), want: ints(1, 5, 3, 0, 60000)},
		{args: cmd("RL.PEEK", "b"), want: ints(1, 2, 1, 0, 60000)},
		// A denied call stores no parameters either; -1 wins the retry.
		{args: cmd("RL.ALL", "3", "FIXED", "a", "4", "1m", "1", "FIXED", "b", "2", "1m", "2", "LOG", "c", "2", "1m", "3"),
			want: allReply([5]int64{0, 2, 1, -1, 60000}, [5]int64{1, 4, 2, 0, 60000}, [5]int64{0, 2, 1, 60000, 60000}, [5]int64{0, 2, 2, -1, 0})},
		{args: cmd("RL.PEEK", "a"), want: ints(1, 5, 3, 0, 60000)},
		{args: cmd("EXISTS", "c"), want: ":0"},
		// Allowed: every limit charged; the combined limit is the one with
		// the fewest remaining (the first on ties).
		{warpMs: 1000, args: cmd("RL.ALL", "2", "FIXED", "a", "5", "1m", "1", "FIXED", "b", "2", "1m", "1"),
			want: allReply([5]int64{1, 2, 0, 0, 59000}, [5]int64{1, 5, 2, 0, 59000}, [5]int64{1, 2, 0, 0, 59000})},
		{args: cmd("RL.ALL", "2", "FIXED", "x", "3", "1m", "1", "FIXED", "y", "3", "1m", "1"),
			want: allReply([5]int64{1, 3, 2, 0, 59000}, [5]int64{1, 3, 2, 0, 59000}, [5]int64{1, 3, 2, 0, 59000})},
		// A refund and a peek inside RL.ALL.
		{args: cmd("RL.ALL", "2", "FIXED", "a", "5", "1m", "-1", "FIXED", "b", "2", "1m", "0"),
			want: allReply([5]int64{1, 2, 0, 0, 59000}, [5]int64{1, 5, 3, 0, 59000}, [5]int64{1, 2, 0, 0, 59000})},
		// A cost-0 limit above its lowered limit denies the call.
		{args: cmd("RL.ALL", "2", "FIXED", "a", "1", "1m", "0", "FIXED", "z", "10", "1m", "1"),
			want: allReply([5]int64{0, 1, 0, 59000, 59000}, [5]int64{0, 1, 0, 59000, 59000}, [5]int64{1, 10, 10, 0, 0})},
		{args: cmd("EXISTS", "z"), want: ":0"},
		// A cost-0 limit on an absent key stores nothing in an allowed call.
		{args: cmd("RL.ALL", "2", "FIXED", "x", "3", "1m", "0", "FIXED", "fresh", "3", "1m", "0"),
			want: allReply([5]int64{1, 3, 2, 0, 59000}, [5]int64{1, 3, 2, 0, 59000}, [5]int64{1, 3, 3, 0, 0})},
		{args: cmd("EXISTS", "fresh"), want: ":0"},
		// Wrong type anywhere: an error, nothing changes.
		{args: cmd("RL.TOKEN", "t", "5", "1/s"), want: ints(1, 5, 4, 0, 1000)},
		{args: cmd("RL.ALL", "2", "FIXED", "y", "3", "1m", "1", "SLIDING", "t", "5", "1m", "1"), want: wrongTypeReply},
		{args: cmd("RL.PEEK", "y"), want: ints(1, 3, 2, 0, 59000)},
		// A bad argument wins over a wrong type.
		{args: cmd("RL.ALL", "2", "FIXED", "t", "5", "1m", "1", "FIXED", "q", "0", "1m", "1"), want: "-ERR invalid limit '0': must be at least 1"},
		{args: cmd("RL.ALL", "2", "FIXED", "a", "5", "1m", "1", "TOKEN", "a", "5", "1/s", "1"), want: "-ERR duplicate key 'a' in RL.ALL"},
		// The duplicate is judged once every argument is valid.
		{args: cmd("RL.ALL", "3", "FIXED", "a", "5", "1m", "1", "FIXED", "a", "5", "1m", "1", "FIXED", "q", "5", "1m", "-0"), want: "-ERR invalid cost '-0': must be an integer from -9007199254740992 to 9007199254740992, -0 excluded"},
		{args: cmd("RL.ALL", "3", "FIXED", "q", "5", "1m", "1", "FIXED", "a\x01", "5", "1m", "1", "FIXED", "a\x01", "5", "1m", "1"), want: "-ERR duplicate key 'a\\x01' in RL.ALL"},
		{args: cmd("RL.ALL", "0", "FIXED", "a", "5", "1m", "1"), want: "-ERR invalid numlimits '0': must be an integer from 1 to 64"},
		{args: cmd("RL.ALL", "65", "FIXED", "a", "5", "1m", "1"), want: "-ERR invalid numlimits '65': must be an integer from 1 to 64"},
		{args: cmd("RL.ALL", "x", "FIXED", "a", "5", "1m", "1"), want: "-ERR invalid numlimits 'x': must be an integer from 1 to 64"},
		{args: cmd("RL.ALL", "2", "FIXED", "a", "5", "1m", "1"), want: "-ERR wrong number of arguments for 'rl.all' command"},
		{args: cmd("RL.ALL", "1", "FIXED", "a", "5", "1m"), want: "-ERR wrong number of arguments for 'rl.all' command"},
		{args: cmd("RL.ALL", "1", "FIXED", "a", "5", "1m", "1", "x"), want: "-ERR wrong number of arguments for 'rl.all' command"},
		{args: cmd("RL.ALL", "1", "BUCKET", "a", "5", "1m", "1"), want: "-ERR invalid algorithm 'BUCKET': must be TOKEN, LEAKY, FIXED, SLIDING or LOG"},
		{args: cmd("RL.ALL", "1", "GCRA", "a", "5", "1m", "1"), want: "-ERR invalid algorithm 'GCRA': must be TOKEN, LEAKY, FIXED, SLIDING or LOG"},
		{args: cmd("RL.ALL", "1", "FIXED", "", "5", "1m", "1"), want: "-ERR invalid key '': must be 1 to 1024 bytes"},
		{args: cmd("RL.ALL", "1", "TOKEN", "a", "5", "0", "1"), want: "-ERR invalid rate '0': must be a positive number or N/duration"},
		{args: cmd("RL.ALL", "1", "LOG", "a", "100001", "1m", "1"), want: "-ERR invalid limit '100001': exceeds max-log-limit 100000"},
		{args: cmd("RL.ALL", "1", "FIXED", "a", "5", "1m", "-0"), want: "-ERR invalid cost '-0': must be an integer from -9007199254740992 to 9007199254740992, -0 excluded"},
		{args: cmd("RL.ALL", "2", "FIXED", "a", "5", "1m", "1", "FIXED", "A", "5", "1m", "x"), want: "-ERR invalid cost 'x': must be an integer from 0 to 9007199254740992"},
		{args: cmd("RL.PEEK", "a"), want: ints(1, 5, 3, 0, 59000)},
	})
}

// TestLeases: RL.ACQUIRE and RL.RELEASE with a frozen clock.
func TestLeases(t *testing.T) {
	runScenario(t, epoch2030, []step{
		{args: cmd("RL.ACQUIRE", "c", "2", "10s", "ID", "t1"), want: ints(1, 2, 1, 0, 10000)},
		{warpMs: 1000, args: cmd("RL.ACQUIRE", "c", "2", "10s", "id", "t2"), want: ints(1, 2, 0, 0, 10000)},
		{args: cmd("RL.ACQUIRE", "c", "2", "10s", "ID", "t3"), want: ints(0, 2, 0, 9000, 10000)},
		{args: cmd("TYPE", "c"), want: "+concurrency"},
		{args: cmd("RL.PEEK", "c"), want: ints(1, 2, 0, 0, 10000)},
		{args: cmd("PTTL", "c"), want: ":10000"},
		// A renewal: allowed even with a COST above the limit; the units
		// stay those of the original acquire.
		{args: cmd("RL.ACQUIRE", "c", "2", "30s", "ID", "t1", "COST", "5"), want: ints(1, 2, 0, 0, 30000)},
		// t2 expires at exactly 11 s: denied 1 ms before, allowed at it.
		{warpMs: 9999, args: cmd("RL.ACQUIRE", "c", "2", "10s", "ID", "t3"), want: ints(0, 2, 0, 1, 20001)},
		{warpMs: 1, args: cmd("RL.ACQUIRE", "c", "2", "10s", "ID", "t3"), want: ints(1, 2, 0, 0, 20000)},
		{args: cmd("RL.RELEASE", "c", "t2"), want: ":0"},
		{args: cmd("RL.RELEASE", "c", "nope"), want: ":0"},
		{args: cmd("RL.RELEASE", "nokey", "t1"), want: ":0"},
		{args: cmd("RL.RELEASE", "c", "t3"), want: ":1"},
		{args: cmd("RL.RELEASE", "c", "t3"), want: ":0"},
		{args: cmd("RL.ACQUIRE", "c", "2", "10s", "ID", "t9", "COST", "0"), want: ints(1, 2, 1, 0, 20000)},
		{args: cmd("RL.RELEASE", "c", "t1"), want: ":1"},
		{args: cmd("EXISTS", "c"), want: ":0"},
		// n > limit on an absent key: retry -1, nothing stored.
		{args: cmd("RL.ACQUIRE", "d", "2", "10s", "ID", "x", "COST", "3"), want: ints(0, 2, 2, -1, 0)},
		{args: cmd("EXISTS", "d"), want: ":0"},
		// ID and COST in either order; a repeated option keeps its last value.
		{args: cmd("RL.ACQUIRE", "e", "3", "10s", "COST", "2", "ID", "a"), want: ints(1, 3, 1, 0, 10000)},
		{args: cmd("RL.ACQUIRE", "e", "3", "10s", "ID", "zz", "COST", "5", "ID", "b", "cost", "1"), want: ints(1, 3, 0, 0, 10000)},
		{args: cmd("RL.RELEASE", "e", "zz"), want: ":0"},
		// A lowered limit: a peek denies until enough leases expire.
		{args: cmd("RL.ACQUIRE", "e", "1", "10s", "ID", "p", "COST", "0"), want: ints(0, 1, 0, 10000, 10000)},
		{args: cmd("RL.ACQUIRE", "e", "1", "10s", "ID", "p"), want: ints(0, 1, 0, 10000, 10000)},
		{args: cmd("RL.PEEK", "e"), want: ints(0, 1, 0, 10000, 10000)},
		// After expiry the same token starts a new lease.
		{warpMs: 10000, args: cmd("RL.ACQUIRE", "e", "3", "10s", "ID", "a"), want: ints(1, 3, 2, 0, 10000)},
		// A renewal's expiry is now + ttl even if earlier; above a lowered
		// limit it is still allowed, and it stores the new limit.
		{args: cmd("RL.ACQUIRE", "f", "2", "30s", "ID", "a", "COST", "2"), want: ints(1, 2, 0, 0, 30000)},
		{warpMs: 1000, args: cmd("RL.ACQUIRE", "f", "1", "5s", "ID", "a"), want: ints(1, 1, 0, 0, 5000)},
		{args: cmd("RL.PEEK", "f"), want: ints(0, 1, 0, 5000, 5000)},
		{args: cmd("PTTL", "f"), want: ":5000"},
		{warpMs: 5000, args: cmd("EXISTS", "f"), want: ":0"},
		// Errors, checked before the key's type.
		{args: cmd("RL.TOKEN", "t", "5", "1/s"), want: ints(1, 5, 4, 0, 1000)},
		{args: cmd("RL.ACQUIRE", "t", "2", "10s", "ID", "x"), want: wrongTypeReply},
		{args: cmd("RL.RELEASE", "t", "x"), want: wrongTypeReply},
		{args: cmd("RL.TOKEN", "e", "5", "1/s"), want: wrongTypeReply},
		{args: cmd("RL.ALL", "1", "FIXED", "e", "5", "1m", "1"), want: wrongTypeReply},
		{args: cmd("RL.RELEASE", "t", ""), want: "-ERR invalid token '': must be 1 to 128 bytes"},
		{args: cmd("RL.RELEASE", "t", strings.Repeat("x", 129)), want: "-ERR invalid token '" + strings.Repeat("x", 64) + "...': must be 1 to 128 bytes"},
		{args: cmd("RL.ACQUIRE", "t", "2", "10s", "ID", strings.Repeat("x", 128)), want: wrongTypeReply},
		{args: cmd("RL.ACQUIRE", "c", "2", "10s"), want: "-ERR wrong number of arguments for 'rl.acquire' command"},
		{args: cmd("RL.ACQUIRE", "c", "2", "10s", "COST", "1"), want: "-ERR option ID token is required for 'rl.acquire'"},
		{args: cmd("RL.ACQUIRE", "c", "2", "10s", "COST", "1", "ID"), want: "-ERR option ID needs a value"},
		{args: cmd("RL.ACQUIRE", "c", "2", "10s", "ID", "a", "FOO", "1"), want: "-ERR unknown option 'FOO' for 'rl.acquire': expected ID token or COST n"},
		{args: cmd("RL.ACQUIRE", "c", "2", "10s", "ID", "a", "COST", "-1"), want: "-ERR invalid cost '-1': must be an integer from 0 to 9007199254740992"},
		{args: cmd("RL.ACQUIRE", "c", "0", "10s", "ID", "a"), want: "-ERR invalid limit '0': must be at least 1"},
		{args: cmd("RL.ACQUIRE", "c", "100001", "10s", "ID", "a"), want: "-ERR invalid limit '100001': exceeds max-log-limit 100000"},
		{args: cmd("RL.ACQUIRE", "c", "2", "0", "ID", "a"), want: "-ERR invalid ttl '0': must be a duration from 1ms to 366d"},
		{args: cmd("RL.ACQUIRE", "c", "2", "10s", "ID", ""), want: "-ERR invalid token '': must be 1 to 128 bytes"},
		{args: cmd("RL.RELEASE", "c"), want: "-ERR wrong number of arguments for 'rl.release' command"},
		{args: cmd("RL.RELEASE", "c", "a", "b"), want: "-ERR wrong number of arguments for 'rl.release' command"},
		{args: cmd("EXISTS", "c"), want: ":0"},
	})
}

// TestLeaseScanAndCommandInfo: SCAN TYPE concurrency finds lease keys, and
// COMMAND INFO gives the new commands' key positions.
func TestLeaseScanAndCommandInfo(t *testing.T) {
	addr := debugServer(t, epoch2030)
	c := newClient(t, addr, 3)
	ctx := context.Background()
	for _, args := range [][]any{
		{"RL.ACQUIRE", "lease:1", "5", "1m", "ID", "a"},
		{"RL.TOKEN", "tok:1", "5", "1/s"},
	} {
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	keys, _, err := c.ScanType(ctx, 0, "*", 100, "concurrency").Result()
	if err != nil || len(keys) != 1 || keys[0] != "lease:1" {
		t.Fatalf("SCAN TYPE concurrency: %v, %v", keys, err)
	}
	raw := rawDial(t, addr)
	raw.do(t, "COMMAND", "INFO", "rl.all").expect(t, "*1 [*10 [$6 rl.all :-7 *2 [+write +denyoom] :3 :-4 :5 *1 [+@sluice] *0 [] *0 [] *0 []]]")
	got := string(raw.do(t, "COMMAND", "INFO", "rl.acquire", "rl.release"))
	for _, want := range []string{"$10 rl.acquire :-6 *3 [+write +denyoom +fast] :1 :1 :1", "$10 rl.release :3 *2 [+write +fast] :1 :1 :1"} {
		if !strings.Contains(got, want) {
			t.Fatalf("COMMAND INFO: %q lacks %q", got, want)
		}
	}
	docs := string(raw.do(t, "COMMAND", "DOCS", "rl.all"))
	for _, want := range []string{"numlimits", "$9 algorithm", "$5 token", "$7 sliding", "+multiple"} {
		if !strings.Contains(docs, want) {
			t.Fatalf("COMMAND DOCS rl.all: %q lacks %q", docs, want)
		}
	}
}

// TestRuleCache checks that RL.ALL's per-connection rule cache answers
// exactly what parsing answers, whatever came before: the same bytes under
// another kind, bytes that differ only in where the two parameters split,
// more distinct rules than it holds, invalid arguments, RL.LOG's rules
// (bounded by max-log-limit, never cached) and arguments too long to keep.
func TestRuleCache(t *testing.T) {
	s := NewServer(Config{MaxLogLimit: 50}, nil)
	long := strings.Repeat("9", 30)
	seq := []struct {
		kind string
		a, b string
	}{
		{"token", "10", "1/s"}, {"token", "10", "1/s"}, {"leaky", "10", "1/s"},
		{"fixed", "10", "1s"}, {"sliding", "10", "1s"}, {"fixed", "10", "1s"},
		{"token", "100", "/1s"}, {"token", "10", "0/1s"}, {"token", "1", "00/1s"},
		{"token", "10", "2/s"}, {"token", "1", "11/s"}, {"token", "11", "1/s"},
		{"token", "x", "1/s"}, {"token", "x", "1/s"}, {"token", "0", "1/s"},
		{"log", "50", "1s"}, {"log", "51", "1s"}, {"log", "51", "1s"},
		{"fixed", long, "1s"}, {"fixed", long, "1s"}, {"fixed", "1", long + "ms"},
		{"token", "10", "1/s"}, {"leaky", "10", "1/s"}, {"sliding", "10", "1s"},
	}
	var rc ruleCache
	for i, st := range seq {
		kind := allAlgorithm([]byte(st.kind))
		// Twice: a miss, then what the cache now holds.
		for range 2 {
			want, werr := s.parseRule(kind, []byte(st.a), []byte(st.b))
			got, gerr := rc.parse(s, kind, []byte(st.a), []byte(st.b))
			if got != want || fmt.Sprint(gerr) != fmt.Sprint(werr) {
				t.Errorf("%d: %s %q %q: %+v %v, want %+v %v", i, st.kind, st.a, st.b, got, gerr, want, werr)
			}
		}
	}
}

// TestRenderAll: RL.ALL's reply, whose per-limit integers copy the
// combined ones' renderings where equal, is byte for byte the plain
// rendering of every integer, on random results whose values often repeat
// across places and limits (small, large, negative, in both protocols).
func TestRenderAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pool := []int64{0, 1, 9, 10, 11, -1, 100, 1 << 40, 1<<40 - 1, 60000, 59999, math.MaxInt64, math.MinInt64}
	val := func() int64 {
		if rng.IntN(4) == 0 {
			return rng.Int64N(1 << 20)
		}
		return pool[rng.IntN(len(pool))]
	}
	five := func() engine.Result {
		return engine.Result{Allowed: rng.IntN(2) == 0, Limit: val(), Remaining: val(), RetryAfter: val(), ResetAfter: val()}
	}
	plain := func(r *replyBuf, res *engine.Result) {
		allowed := int64(0)
		if res.Allowed {
			allowed = 1
		}
		for _, v := range []int64{allowed, res.Limit, res.Remaining, res.RetryAfter, res.ResetAfter} {
			r.b = append(r.b, ':')
			r.b = strconv.AppendInt(r.b, v, 10)
			r.b = append(r.b, '\r', '\n')
		}
	}
	for round := range 2000 {
		res := five()
		res.Each = make([]engine.Result, 1+rng.IntN(4))
		for i := range res.Each {
			res.Each[i] = five()
			if rng.IntN(2) == 0 { // the combined values come from the limits
				res.Each[i].Limit, res.Each[i].Remaining = res.Limit, res.Remaining
			}
			if rng.IntN(2) == 0 {
				res.Each[i].ResetAfter, res.Each[i].RetryAfter = res.ResetAfter, res.RetryAfter
			}
		}
		got := replyBuf{proto: 2 + round%2, b: []byte("prefix")}
		renderAll(nil, &got, nil, []engine.Result{res})
		want := replyBuf{proto: got.proto, b: []byte("prefix")}
		want.Array(5 + len(res.Each))
		plain(&want, &res)
		for i := range res.Each {
			want.Array(5)
			plain(&want, &res.Each[i])
		}
		if !bytes.Equal(got.b, want.b) {
			t.Fatalf("round %d: %+v\ngot  %q\nwant %q", round, res, got.b, want.b)
		}
	}
}

// TestAllAlgorithmsFromTable: RL.ALL's algorithms are the layerable kinds
// of the engine's table of kinds, and its COMMAND DOCS argument and its
// error text list those same kinds.
func TestAllAlgorithmsFromTable(t *testing.T) {
	var names, tokens []string
	for k := engine.KindNone + 1; k < engine.NumKinds; k++ {
		if !k.Layerable() {
			if got := allAlgorithm([]byte(k.String())); got != engine.KindNone {
				t.Errorf("RL.ALL takes %q, a kind that cannot be layered", k)
			}
			continue
		}
		names = append(names, k.String())
		tokens = append(tokens, strings.ToUpper(k.String()))
		for _, n := range []string{k.String(), strings.ToUpper(k.String())} {
			if got := allAlgorithm([]byte(n)); got != k {
				t.Errorf("allAlgorithm(%q) = %v, want %v", n, got, k)
			}
		}
	}
	want := "must be " + strings.Join(tokens[:len(tokens)-1], ", ") + " or " + tokens[len(tokens)-1]
	if allAlgorithmsText != want {
		t.Errorf("allAlgorithmsText = %q, want %q", allAlgorithmsText, want)
	}
	var docs []string
	for _, a := range rlAllCommand().args[1].subargs[0].subargs {
		docs = append(docs, a.name)
		if a.token != strings.ToUpper(a.name) {
			t.Errorf("RL.ALL's algorithm %q has token %q", a.name, a.token)
		}
	}
	if fmt.Sprint(docs) != fmt.Sprint(names) {
		t.Errorf("RL.ALL's documented algorithms are %v, the layerable kinds %v", docs, names)
	}
}
