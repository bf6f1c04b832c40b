package codec

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
)

func sampleOps() []engine.Op {
	return []engine.Op{
		decide("k", tokenRule, 1),
		{Code: engine.OpDecide, Key: []byte{0, '\r', '\n', 0xff}, Rule: engine.Rule{Kind: engine.KindGCRA, Limit: math.MaxInt64, Period: math.MinInt64}, Cost: -1},
		{Code: engine.OpPeek, Key: []byte("p")},
		{Code: engine.OpScan, Cursor: math.MaxUint64, Pattern: []byte("user:*"), Rule: engine.Rule{Kind: engine.KindLog}, Count: 10},
		{Code: engine.OpKeys, Pattern: []byte("*")},
		{Code: engine.OpCount},
		{Code: engine.OpTimeWarp, Clock: int64(time.Hour)},
		{Code: engine.OpClockFreeze},
		{Code: 200}, // unknown codes travel; the engine refuses them
		{Code: engine.OpAll, All: []engine.Limit{
			{Key: []byte("u:rpm"), Rule: tokenRule, Cost: 1},
			{Key: []byte{0, 0xff}, Rule: engine.Rule{Kind: engine.KindLog, Limit: 100000, Period: int64(time.Minute)}, Cost: -(1 << 53)},
			{Key: []byte("z"), Rule: engine.Rule{Kind: engine.KindFixed, Limit: 1, Period: 1}},
		}},
		{Code: engine.OpAcquire, Key: []byte("c"), Rule: engine.Rule{Kind: engine.KindConcurrency, Limit: 5, Period: int64(time.Minute)}, Cost: 2, Token: []byte("req-1")},
		{Code: engine.OpRelease, Key: []byte("c"), Token: bytes.Repeat([]byte{0xfe}, 128)},
		{Code: engine.OpSet, Key: []byte("s"), Value: []byte("12"), Flags: engine.StrNX | engine.StrExpireRel, Expire: 60000},
		{Code: engine.OpSet, Key: []byte("s"), Flags: engine.StrGet},
		{Code: engine.OpIncrBy, Key: []byte("s"), Delta: math.MinInt64},
		{Code: engine.OpExpire, Key: []byte("s"), Expire: math.MinInt64, Flags: math.MaxUint32},
		{Code: engine.OpGet, Key: []byte("s"), Value: bytes.Repeat([]byte{0}, 512)},
		{Code: engine.OpGet, Key: []byte("h"), Args: [][]byte{[]byte("f"), {}, []byte("v")}, DB: 15},
		{Code: engine.OpGet, Key: []byte("h"), DB: 255},
		// Envoy's rate limit service: a repeated key, a zero limit, the
		// shadow mask.
		{Code: engine.OpRateLimit, Shadow: 1<<63 | 2, All: []engine.Limit{
			{Key: []byte("{api}|path=/a|hour"), Rule: engine.Rule{Kind: engine.KindFixed, Limit: 10, Period: int64(time.Hour)}, Cost: 3},
			{Key: []byte("{api}|path=/a|hour"), Rule: engine.Rule{Kind: engine.KindFixed, Limit: 10, Period: int64(time.Hour)}, Cost: 3},
			{Key: []byte("{api}|z|year"), Rule: engine.Rule{Kind: engine.KindFixed, Period: 365 * 24 * int64(time.Hour)}, Cost: 1},
		}},
	}
}

func TestEntryRoundTrip(t *testing.T) {
	ops := sampleOps()
	data := AppendOpsEntryHeader(nil, -42, len(ops))
	for i := range ops {
		data = AppendOp(data, &ops[i])
	}
	if len(data) > OpsSize(ops) {
		t.Fatalf("OpsSize %d underestimates %d bytes", OpsSize(ops), len(data))
	}
	e, err := DecodeEntryInto(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Type != EntryOps || e.Stamp != -42 || !reflect.DeepEqual(e.Ops, ops) {
		t.Fatalf("decoded %+v\nwant %+v", e.Ops, ops)
	}

	le := Leader{ID: "n1", RESP: "127.0.0.1:6001", Forward: "127.0.0.1:8001"}
	e, err = DecodeEntryInto(AppendLeaderEntry(nil, le), nil, nil)
	if err != nil || e.Type != EntryLeader || e.Leader != le {
		t.Fatalf("leader entry: %+v, %v", e, err)
	}
}

func TestEntryDecodeErrors(t *testing.T) {
	good := AppendOpsEntryHeader(nil, 1, 1)
	good = AppendOp(good, &engine.Op{Code: engine.OpDecide, Key: []byte("key")})
	tests := []struct {
		name string
		data []byte
		text string
	}{
		{"empty", nil, "empty"},
		{"unknown type", []byte{9}, "unknown entry type 0x09"},
		{"count beyond the bytes", append([]byte{EntryOps, 0}, 0xff, 0xff, 0xff, 0xff, 0x0f), "ops in"},
		{"truncated key", good[:len(good)-1], "truncated"},
		{"stray bytes", append(bytes.Clone(good), 0), "stray"},
		{"unknown field", []byte{EntryOps, 0, 1, 1, 0x80, 0x08}, "unknown extension mask 0x8"},
		{"empty extension", []byte{EntryOps, 0, 1, 1, 0x80, 0}, "unknown extension mask 0x0"},
		{"reserved extension", []byte{EntryOps, 0, 1, 1, 0x80, 0x80, 0x80, 0x10}, "unknown extension mask 0x40000"},
		{"no arguments", []byte{EntryOps, 0, 1, 1, 0x80, 0x80, 0x80, 0x04, 0}, "0 arguments"},
		{"database 0 written", []byte{EntryOps, 0, 1, 1, 0x80, 0x80, 0x80, 0x08, 0}, "database 0"},
		{"database beyond a byte", []byte{EntryOps, 0, 1, 1, 0x80, 0x80, 0x80, 0x08, 0x80, 0x02}, "database 256"},
		{"truncated extension", []byte{EntryOps, 0, 1, 1, 0x80}, "truncated"},
		{"flags beyond 32 bits", []byte{EntryOps, 0, 1, 1, 0x80, 0x04, 0x80, 0x80, 0x80, 0x80, 0x10}, "flags"},
		{"varint overflow", append([]byte{EntryOps}, bytes.Repeat([]byte{0xff}, 11)...), "truncated varint"},
		{"no limits", []byte{EntryOps, 0, 1, byte(engine.OpAll), fieldAll, 0}, "0 limits"},
		{"65 limits", append([]byte{EntryOps, 0, 1, byte(engine.OpAll), fieldAll, 65}, make([]byte, 65*5)...), "65 limits"},
		{"truncated limit", []byte{EntryOps, 0, 1, byte(engine.OpAll), fieldAll, 1, 1, 2, 2, 2, 5, 'a'}, "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeEntryInto(tt.data, nil, nil)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("err = %v, want %q", err, tt.text)
			}
		})
	}
}

func FuzzDecodeEntry(f *testing.F) {
	ops := sampleOps()
	data := AppendOpsEntryHeader(nil, 7, len(ops))
	for i := range ops {
		data = AppendOp(data, &ops[i])
	}
	f.Add(data)
	f.Add(AppendLeaderEntry(nil, Leader{ID: "n1", RESP: "a", Forward: "b"}))
	f.Add(AppendResults(nil, sampleResultOps(), sampleResults()))
	f.Add(AppendVersionEntry(nil, 2))
	f.Add(append([]byte{EntryIgnorable | EntryOps}, data[1:]...))
	f.Fuzz(func(t *testing.T, data []byte) {
		if e, err := DecodeEntryInto(data, nil, nil); err == nil && e.Type == EntryOps {
			again := AppendOpsEntryHeader(nil, e.Stamp, len(e.Ops))
			for i := range e.Ops {
				again = AppendOp(again, &e.Ops[i])
			}
			if e2, err := DecodeEntryInto(again, nil, nil); err != nil || !reflect.DeepEqual(e2.Ops, e.Ops) {
				t.Fatalf("re-encoding changed the ops: %v", err)
			}
		}
		rs := make([]engine.Result, 4)
		_ = DecodeResults(data, []engine.Op{{Code: engine.OpTTL}, {Code: engine.OpTime}, {}, {}}, rs, testSentinels)
		d := NewDecoder(data)
		d.Ops()
	})
}

func sampleResults() []engine.Result {
	return []engine.Result{
		{Kind: engine.KindToken, Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 720000},
		{Kind: engine.KindGCRA, Limit: 16, RetryAfter: -1, ResetAfter: 2, Remaining: 15},
		{Err: engine.ErrWrongType},
		{Err: &errcode.Error{Code: errcode.BadRule, Detail: "negative cost -1"}},
		{Err: errors.New("something else")},
		{Count: -2},
		{Cursor: math.MaxUint64, Keys: [][]byte{[]byte("a"), {}, {0, 1}}},
		{Keys: [][]byte{}},
		{},
		{Kind: engine.KindFixed, Limit: 2, Remaining: 1, RetryAfter: -1, ResetAfter: 60000, Each: []engine.Result{
			{Kind: engine.KindToken, Allowed: true, Limit: 5, Remaining: 3},
			{Kind: engine.KindFixed, Limit: 2, Remaining: 1, RetryAfter: -1, ResetAfter: 60000},
		}},
		{Kind: engine.KindConcurrency, Allowed: true, Limit: 3, Remaining: 1, ResetAfter: 10000},
		{Err: &errcode.Error{Code: errcode.KeyLimit, Num: 10}},
		{Err: errDuplicateBatch},
		{Kind: engine.KindString, Value: []byte{}},
		{Kind: engine.KindString, Value: []byte("hello"), Count: 1},
		{Err: engine.ErrWrongTypeValue},
		{Values: [][]byte{[]byte("a"), nil, {}, []byte("b")}},
		{Values: [][]byte{}},
		{TTL: -2},
		{Kind: engine.KindString, TTL: 1500},
		{Time: 1_700_000_000_000_000_000},
		{Time: -1},
		{Allowed: true, Time: 1_700_000_000_000_000_000, Each: []engine.Result{{Kind: engine.KindFixed, Allowed: true, Limit: 10, Remaining: 7}}},
	}
}

// sampleResultOps are the ops sampleResults answer: their codes say
// which number travels in the count field.
func sampleResultOps() []engine.Op {
	ops := make([]engine.Op, len(sampleResults()))
	n := len(ops)
	ops[n-5].Code, ops[n-4].Code, ops[n-3].Code, ops[n-2].Code, ops[n-1].Code =
		engine.OpTTL, engine.OpTTL, engine.OpTime, engine.OpExpireTime, engine.OpRateLimit
	return ops
}

// wireError is what err becomes on the wire: its code and details, or an
// Other error naming its text when it has no code.
func wireError(err error) errcode.Error {
	if e := errcode.Of(err); e != nil {
		return errcode.Error{Code: e.Code, Detail: e.Detail, Num: e.Num}
	}
	return errcode.Error{Code: errcode.Other, Detail: err.Error()}
}

func TestResultsRoundTrip(t *testing.T) {
	in := sampleResults()
	out := make([]engine.Result, len(in))
	ops := sampleResultOps()
	if err := DecodeResults(AppendResults(nil, ops, in), ops, out, testSentinels); err != nil {
		t.Fatal(err)
	}
	for i := range in {
		a, b := in[i], out[i]
		if (a.Err == nil) != (b.Err == nil) || (a.Err != nil && wireError(a.Err) != wireError(b.Err)) {
			t.Fatalf("result %d: err %v, want %v", i, b.Err, a.Err)
		}
		a.Err, b.Err = nil, nil
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("result %d: %+v, want %+v", i, b, a)
		}
	}
	if out[2].Err != engine.ErrWrongType || !errors.Is(out[3].Err, engine.ErrBadRule) || errors.Is(out[4].Err, engine.ErrBadRule) ||
		!errcode.Is(out[4].Err, errcode.Other) || !errors.Is(out[11].Err, engine.ErrKeyLimit) || out[12].Err != errDuplicateBatch {
		t.Fatalf("errors not mapped back: %v, %v, %v, %v, %v", out[2].Err, out[3].Err, out[4].Err, out[11].Err, out[12].Err)
	}
	if err := DecodeResults(AppendResults(nil, ops, in), ops, make([]engine.Result, 2), testSentinels); err == nil {
		t.Fatal("a results count mismatch was accepted")
	}
}
