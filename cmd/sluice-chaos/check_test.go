package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

const ms = int64(time.Millisecond)

// t2030 is 2030-01-01T00:00:00Z in unix ns, the wall start of the
// synthetic histories (an epoch-aligned 5 s window boundary).
const t2030 = int64(1893456000) * int64(time.Second)

func testKeys() []*keySpec {
	return []*keySpec{
		{ID: 0, Name: "zero-token", Kind: kindToken, Limit: 5, Period: day366, Zero: true},
		{ID: 1, Name: "rate-token", Kind: kindToken, Limit: 4, Period: time.Second},
		{ID: 2, Name: "rate-fixed", Kind: kindFixed, Limit: 3, Period: 5 * time.Second},
		{ID: 3, Name: "rate-log", Kind: kindLog, Limit: 2, Period: 5 * time.Second},
		{ID: 4, Name: "zero-fixed", Kind: kindFixed, Limit: 3, Period: day366, Zero: true},
	}
}

// decided is an answered decision on key at [call, ret] ms.
func decided(key int, call, ret int64, cost int64, allowed bool, remaining int64) op {
	return op{Key: key, Call: call * ms, Return: ret * ms, Cost: cost, Status: stOK,
		Allowed: allowed, Remaining: remaining}
}

func newTestChecker() *checker {
	return &checker{keys: testKeys(), startWall: t2030, slack: 0}
}

func TestMaxAdmitted(t *testing.T) {
	keys := testKeys()
	tests := []struct {
		key      int
		from, to int64 // ms after t2030
		want     int64
	}{
		{0, 0, 600_000, 5},     // no refill in ten minutes
		{1, 0, 0, 4},           // the capacity at one instant
		{1, 0, 2_500, 6},       // plus one per second elapsed
		{2, 0, 4_999, 3},       // one window
		{2, 4_999, 5_000, 6},   // a boundary: two windows
		{2, -1, 10_000, 9 + 3}, // windows -1, 0, 1, 2
		{3, 0, 4_999, 2},       // log: one stretch of a window
		{3, 0, 5_000, 4},
		{4, 0, 600_000, 3},
	}
	for _, tc := range tests {
		if got := maxAdmitted(keys[tc.key], t2030+tc.from*ms, t2030+tc.to*ms); got != tc.want {
			t.Errorf("%s over [%d, %d] ms: %d, want %d", keys[tc.key].Name, tc.from, tc.to, got, tc.want)
		}
	}
}

func TestCheckBounds(t *testing.T) {
	tests := []struct {
		name    string
		ops     []op
		slack   int64
		wantBad string
	}{
		{"within capacity", []op{
			decided(0, 0, 1, 2, true, 3), decided(0, 2, 3, 3, true, 0), decided(0, 4, 5, 1, false, 0)}, 0, ""},
		{"over capacity", []op{
			decided(0, 0, 1, 3, true, 2), decided(0, 2, 3, 3, true, 2)}, 0, "zero-token"},
		{"refill over time", []op{
			decided(1, 0, 1, 4, true, 0), decided(1, 2000, 2001, 2, true, 0)}, 0, ""},
		{"refill too fast", []op{
			decided(1, 0, 1, 4, true, 0), decided(1, 1000, 1001, 2, true, 0)}, 0, "rate-token"},
		{"slack covers a skewed clock", []op{
			decided(1, 0, 1, 4, true, 0), decided(1, 1000, 1001, 2, true, 0)}, 500 * ms, ""},
		{"fixed window boundary burst is allowed", []op{
			decided(2, 4000, 4001, 3, true, 0), decided(2, 5000, 5001, 3, true, 0)}, 0, ""},
		{"fixed window over its limit", []op{
			decided(2, 1000, 1001, 2, true, 1), decided(2, 2000, 2001, 2, true, 0)}, 0, "rate-fixed"},
		{"unknown outcomes do not count", []op{
			decided(0, 0, 1, 5, true, 0), {Key: 0, Call: 2 * ms, Return: 3 * ms, Cost: 5, Status: stUnknown}}, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ch := newTestChecker()
			ch.slack = tc.slack
			vs, _ := ch.checkBounds(tc.ops)
			expectViolation(t, vs, tc.wantBad)
		})
	}
}

func TestCheckMonotonic(t *testing.T) {
	tests := []struct {
		name    string
		ops     []op
		wantBad string
	}{
		{"counting down", []op{
			decided(0, 0, 1, 1, true, 4), decided(0, 2, 3, 2, true, 2), decided(0, 4, 5, 0, true, 2)}, ""},
		{"forgotten admission", []op{
			decided(0, 0, 1, 1, true, 4), decided(0, 2, 3, 1, true, 3), decided(0, 4, 5, 1, true, 3)}, "zero-token"},
		{"concurrent ops are not ordered", []op{
			decided(0, 0, 10, 1, true, 3), decided(0, 1, 9, 1, true, 4)}, ""},
		{"peek nil is a full bucket", []op{
			decided(0, 0, 1, 1, true, 4), {Key: 0, Peek: true, Nil: true, Status: stOK, Call: 2 * ms, Return: 3 * ms}}, "zero-token"},
		{"token refill may raise remaining", []op{
			decided(1, 0, 1, 4, true, 0), decided(1, 1500, 1501, 0, true, 1)}, ""},
		{"token remaining rises faster than refill", []op{
			decided(1, 0, 1, 4, true, 0), decided(1, 100, 101, 0, true, 2)}, "rate-token"},
		{"fixed: a new window resets", []op{
			decided(2, 4000, 4001, 3, true, 0), decided(2, 5100, 5101, 0, true, 3)}, ""},
		{"fixed: rises within a window", []op{
			decided(2, 1000, 1001, 3, true, 0), decided(2, 2000, 2001, 0, true, 3)}, "rate-fixed"},
		{"log is not checked", []op{
			decided(3, 1000, 1001, 2, true, 0), decided(3, 1100, 1101, 0, true, 2)}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			expectViolation(t, newTestChecker().checkMonotonic(tc.ops), tc.wantBad)
		})
	}
}

func TestCheckLedger(t *testing.T) {
	keys := testKeys()
	ops := []op{
		decided(0, 0, 1, 2, true, 3),
		{Key: 0, Call: 2 * ms, Return: 3 * ms, Cost: 1, Status: stUnknown},
		decided(0, 4, 5, 3, false, 3),
		// Certainly not applied: a final state that shows it is a violation.
		{Key: 0, Call: 6 * ms, Return: 7 * ms, Cost: 2, Status: stFail, Err: "CLUSTERDOWN no quorum"},
	}
	tests := []struct {
		name    string
		read    finalRead
		wantBad string
	}{
		{"unknown op did not apply", finalRead{key: keys[0], rem: 3, ok: true}, ""},
		{"unknown op applied", finalRead{key: keys[0], rem: 2, ok: true}, ""},
		{"admission forgotten", finalRead{key: keys[0], rem: 4, ok: true}, "forgotten"},
		{"phantom admission", finalRead{key: keys[0], rem: 1, ok: true}, "at most 3"},
		{"a CLUSTERDOWN decision applied", finalRead{key: keys[0], rem: 0, ok: true}, "at most 3"},
		{"nodes disagree", finalRead{key: keys[0], nodes: []string{"n1=3", "n2=2"}}, "disagree"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			expectViolation(t, newTestChecker().checkLedger(ops, []finalRead{tc.read}), tc.wantBad)
		})
	}
}

func TestCheckLinearizable(t *testing.T) {
	tests := []struct {
		name    string
		ops     []op
		wantBad bool
	}{
		{"sequential", []op{
			decided(0, 0, 1, 2, true, 3), decided(0, 2, 3, 3, true, 0), decided(0, 4, 5, 1, false, 0)}, false},
		{"concurrent, reordered", []op{
			decided(0, 0, 10, 2, true, 1), decided(0, 1, 9, 2, true, 3)}, false},
		{"both saw the full bucket", []op{
			decided(0, 0, 1, 2, true, 3), decided(0, 2, 3, 2, true, 3)}, true},
		{"an unknown op explains a drop", []op{
			decided(0, 0, 1, 1, true, 4), {Key: 0, Call: 2 * ms, Return: 3 * ms, Cost: 2, Status: stUnknown},
			decided(0, 10, 11, 1, true, 1)}, false},
		{"an unknown op may never apply", []op{
			{Key: 0, Call: 0, Return: 1 * ms, Cost: 2, Status: stUnknown},
			decided(0, 10, 11, 1, true, 4)}, false},
		{"a denial with units left", []op{
			decided(0, 0, 1, 1, true, 4), decided(0, 2, 3, 1, false, 4)}, true},
		{"a CLUSTERDOWN decision that applied", []op{
			decided(0, 0, 1, 1, true, 4), {Key: 0, Call: 2 * ms, Return: 3 * ms, Cost: 2, Status: stFail},
			decided(0, 10, 11, 1, true, 1)}, true},
		{"peek nil after an admission", []op{
			decided(4, 0, 1, 1, true, 2), {Key: 4, Peek: true, Nil: true, Status: stOK, Call: 2 * ms, Return: 3 * ms}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			vs, st := newTestChecker().checkLinearizable(tc.ops, dir, 5*time.Second, 10*time.Second)
			if (len(vs) > 0) != tc.wantBad || st.illegal != len(vs) {
				t.Fatalf("violations %v (stats %+v), want bad=%v", vs, st, tc.wantBad)
			}
			html, _ := filepath.Glob(filepath.Join(dir, "*.html"))
			if tc.wantBad && len(html) != 1 {
				t.Fatalf("no visualization written: %v", html)
			}
			if tc.wantBad {
				b, err := os.ReadFile(html[0])
				if err != nil || !strings.Contains(string(b), "<html") {
					t.Fatalf("visualization %s: %v", html[0], err)
				}
			}
		})
	}
}

func TestClassify(t *testing.T) {
	k := &keySpec{Limit: 5}
	ints := func(v ...int64) respwire.Value {
		r := respwire.Value{Kind: respwire.Array}
		for _, x := range v {
			r.Elems = append(r.Elems, respwire.Value{Kind: respwire.Integer, Int: x})
		}
		return r
	}
	nilReply := respwire.Value{Kind: respwire.BulkString, Null: true}
	errReply := func(s string) respwire.Value { return respwire.Value{Kind: respwire.SimpleError, Str: s} }
	tests := []struct {
		name string
		peek bool
		r    respwire.Value
		err  error
		want status
	}{
		{"allowed", false, ints(1, 5, 4, 0, 200), nil, stOK},
		{"wrong limit", false, ints(1, 6, 4, 0, 200), nil, stUnexpected},
		{"short", false, ints(1, 5, 4), nil, stUnexpected},
		{"peek nil", true, nilReply, nil, stOK},
		{"nil decision", false, nilReply, nil, stUnexpected},
		{"timeout", false, respwire.Value{}, os.ErrDeadlineExceeded, stUnknown},
		{"loading", false, errReply("LOADING sluice is loading the dataset in memory"), nil, stFail},
		{"shutting down", false, errReply("CLUSTERDOWN this node is shutting down"), nil, stFail},
		{"no quorum: not applied", false, errReply("CLUSTERDOWN no quorum: the cluster could not commit within 2s"), nil, stFail},
		{"uncertain", false, errReply("UNCERTAIN leadership changed while committing; the command may have been applied"), nil, stUnknown},
		{"old outcome unknown text", false, errReply("ERR outcome unknown: leadership changed"), nil, stUnexpected},
		{"wrongtype", false, errReply("WRONGTYPE Operation against a key holding the wrong kind of limiter"), nil, stUnexpected},
	}
	for _, tc := range tests {
		o := op{Peek: tc.peek}
		classify(&o, k, tc.r, tc.err)
		if o.Status != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, o.Status, tc.want)
		}
	}
}

func TestKeyParams(t *testing.T) {
	tests := []struct {
		k    keySpec
		want string
	}{
		{keySpec{Kind: kindToken, Period: day366}, "1/366d"},
		{keySpec{Kind: kindLeaky, Period: 200 * time.Millisecond}, "1/200ms"},
		{keySpec{Kind: kindFixed, Period: 5 * time.Second}, "5000ms"},
		{keySpec{Kind: kindLog, Period: day366}, "366d"},
	}
	for _, tc := range tests {
		if got := tc.k.param(); got != tc.want {
			t.Errorf("%v %v: %q, want %q", tc.k.Kind, tc.k.Period, got, tc.want)
		}
	}
}

// expectViolation asserts that vs is empty (want "") or names want.
func expectViolation(t *testing.T, vs []violation, want string) {
	t.Helper()
	if want == "" {
		if len(vs) > 0 {
			t.Fatalf("unexpected violations: %v", vs)
		}
		return
	}
	for _, v := range vs {
		if strings.Contains(v.String(), want) {
			return
		}
	}
	t.Fatalf("violations %v, want one about %q", vs, want)
}
