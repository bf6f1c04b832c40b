package engine

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/constscan"
)

// TestOpTableComplete: every OpCode constant of the engine's sources is
// below numOps and has its row in the table of operations (ops.go), named
// after it, with a route and a merge that agree; every row is such a
// constant's; and the engine applies exactly the codes that have a row.
// A new OpCode fails here until its row is written.
func TestOpTableComplete(t *testing.T) {
	codes := opCodeConstants(t)
	if len(codes) < 27 {
		t.Fatalf("found only %d OpCode constants: the parser missed some", len(codes))
	}
	for name, code := range codes {
		if int(code) >= numOps {
			t.Errorf("%s = %d is not below numOps (%d): raise numOps", name, code, numOps)
			continue
		}
		row := &ops[code]
		if row.name == "" {
			t.Errorf("%s (%d) has no row in the table of operations (engine/ops.go)", name, code)
			continue
		}
		if row.name != name {
			t.Errorf("%s (%d): its row is named %q", name, code, row.name)
		}
		if row.route == 0 || row.route > RouteCursor {
			t.Errorf("%s: route %d unset or unknown", name, row.route)
		}
		if row.merge == 0 || row.merge > MergeFirst {
			t.Errorf("%s: merge %d unset or unknown", name, row.merge)
		}
		if (row.route == RouteEvery) != (row.merge != MergeOne) {
			t.Errorf("%s: route %d with merge %d: an op run in every group merges by sum, concatenation or group 0's; any other runs in one group (MergeOne)", name, row.route, row.merge)
		}
		if row.route == RouteKey && row.keys != KeysKey && row.keys != KeysAll {
			t.Errorf("%s: routed by key, but its keys are %d (not Key nor All)", name, row.keys)
		}
		if row.keys == KeysEvery && row.route != RouteEvery {
			t.Errorf("%s: concerns every key but does not run in every group", name)
		}
	}
	for c := range ops {
		if n := ops[c].name; n != "" && codes[n] != OpCode(c) {
			t.Errorf("row %d is named %q, which is no OpCode constant of that value", c, n)
		}
	}
	for c := range 256 {
		code := OpCode(c)
		hasRow := code.info() != &unknownOp
		if applies := opApplies(code); applies != hasRow {
			t.Errorf("%v (%d): the engine applies it: %v; it has a row: %v", code, c, applies, hasRow)
		}
	}
	if got := OpCode(99).String(); got != "OpCode(99)" {
		t.Errorf("OpCode(99).String() = %q", got)
	}
}

// TestReadsChangeNothing: an op whose row says it does not mutate leaves
// the engine's state (its digest) as it was, on a limiter key, a string
// key, a lease and an absent key.
func TestReadsChangeNothing(t *testing.T) {
	const now = int64(1e18)
	e := New(Config{Stripes: 4})
	res := make([]Result, 4)
	e.Apply(now, []Op{
		{Code: OpDecide, Key: []byte("tok"), Rule: Rule{Kind: KindToken, Limit: 5, Period: 1e9}, Cost: 1},
		{Code: OpSet, Key: []byte("str"), Value: []byte("7"), Flags: StrExpireRel, Expire: 60_000},
		{Code: OpAcquire, Key: []byte("con"), Rule: Rule{Kind: KindConcurrency, Limit: 2, Period: 1e10}, Cost: 1, Token: []byte("t")},
		{Code: OpDecide, Key: []byte("log"), Rule: Rule{Kind: KindLog, Limit: 5, Period: 1e9}, Cost: 1},
	}, res)
	before, n := e.Digest()
	for c := range ops {
		code := OpCode(c)
		if ops[c].name == "" || code.Mutates() {
			continue
		}
		for _, key := range []string{"tok", "str", "con", "log", "absent"} {
			r := make([]Result, 1)
			e.Apply(now, []Op{{Code: code, Key: []byte(key), Cost: 1, Pattern: []byte("*")}}, r)
			if after, m := e.Digest(); after != before || m != n {
				t.Errorf("%v on %q changed the state, but its row says it does not mutate", code, key)
				before, n = after, m
			}
		}
	}
}

// opApplies reports whether the engine applies code (anything but "unknown
// operation code").
func opApplies(code OpCode) bool {
	e := New(Config{Stripes: 1})
	res := make([]Result, 1)
	e.Apply(1e18, []Op{{Code: code, Key: []byte("k"), Rule: Rule{Kind: KindToken, Limit: 5, Period: 1e9}, Cost: 1}}, res)
	return res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "unknown operation code")
}

// opCodeConstants lists the OpCode constants the package's non-test
// sources declare, whether or not the table has their rows.
func opCodeConstants(t *testing.T) map[string]OpCode {
	t.Helper()
	lits, err := constscan.Literals(".", "OpCode")
	if err != nil {
		t.Fatal(err)
	}
	codes := make(map[string]OpCode, len(lits))
	for name, n := range lits {
		codes[name] = OpCode(n)
	}
	return codes
}
