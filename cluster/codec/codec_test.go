package cluster

import (
	"bufio"
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
		{Code: engine.OpIncrBy, Key: []byte("s"), Cost: math.MinInt64},
		{Code: engine.OpExpire, Key: []byte("s"), Expire: math.MinInt64, Flags: math.MaxUint32},
		{Code: engine.OpGet, Key: []byte("s"), Value: bytes.Repeat([]byte{0}, 512)},
		// Envoy's rate limit service: a repeated key, a zero limit, the
		// shadow mask in Cursor.
		{Code: engine.OpRateLimit, Cursor: 1<<63 | 2, All: []engine.Limit{
			{Key: []byte("{api}|path=/a|hour"), Rule: engine.Rule{Kind: engine.KindFixed, Limit: 10, Period: int64(time.Hour)}, Cost: 3},
			{Key: []byte("{api}|path=/a|hour"), Rule: engine.Rule{Kind: engine.KindFixed, Limit: 10, Period: int64(time.Hour)}, Cost: 3},
			{Key: []byte("{api}|z|year"), Rule: engine.Rule{Kind: engine.KindFixed, Period: 365 * 24 * int64(time.Hour)}, Cost: 1},
		}},
	}
}

func TestEntryRoundTrip(t *testing.T) {
	ops := sampleOps()
	data := appendOpsEntryHeader(nil, -42, len(ops))
	for i := range ops {
		data = appendOp(data, &ops[i])
	}
	if len(data) > opsSize(ops) {
		t.Fatalf("opsSize %d underestimates %d bytes", opsSize(ops), len(data))
	}
	e, err := decodeEntry(data)
	if err != nil {
		t.Fatal(err)
	}
	if e.typ != entryOps || e.stamp != -42 || !reflect.DeepEqual(e.ops, ops) {
		t.Fatalf("decoded %+v\nwant %+v", e.ops, ops)
	}

	le := leaderEntry{ID: "n1", RESP: "127.0.0.1:6001", Forward: "127.0.0.1:8001"}
	e, err = decodeEntry(appendLeaderEntry(nil, le))
	if err != nil || e.typ != entryLeader || e.leader != le {
		t.Fatalf("leader entry: %+v, %v", e, err)
	}
}

func TestEntryDecodeErrors(t *testing.T) {
	good := appendOpsEntryHeader(nil, 1, 1)
	good = appendOp(good, &engine.Op{Code: engine.OpDecide, Key: []byte("key")})
	tests := []struct {
		name string
		data []byte
		text string
	}{
		{"empty", nil, "empty"},
		{"unknown type", []byte{9}, "unknown entry type 0x09"},
		{"count beyond the bytes", append([]byte{entryOps, 0}, 0xff, 0xff, 0xff, 0xff, 0x0f), "ops in"},
		{"truncated key", good[:len(good)-1], "truncated"},
		{"stray bytes", append(bytes.Clone(good), 0), "stray"},
		{"unknown field", []byte{entryOps, 0, 1, 1, 0x80, 0x08}, "unknown extension mask 0x8"},
		{"empty extension", []byte{entryOps, 0, 1, 1, 0x80, 0}, "unknown extension mask 0x0"},
		{"reserved extension", []byte{entryOps, 0, 1, 1, 0x80, 0x80, 0x80, 0x04}, "unknown extension mask 0x10000"},
		{"truncated extension", []byte{entryOps, 0, 1, 1, 0x80}, "truncated"},
		{"flags beyond 32 bits", []byte{entryOps, 0, 1, 1, 0x80, 0x04, 0x80, 0x80, 0x80, 0x80, 0x10}, "flags"},
		{"varint overflow", append([]byte{entryOps}, bytes.Repeat([]byte{0xff}, 11)...), "truncated varint"},
		{"no limits", []byte{entryOps, 0, 1, byte(engine.OpAll), fieldAll, 0}, "0 limits"},
		{"65 limits", append([]byte{entryOps, 0, 1, byte(engine.OpAll), fieldAll, 65}, make([]byte, 65*5)...), "65 limits"},
		{"truncated limit", []byte{entryOps, 0, 1, byte(engine.OpAll), fieldAll, 1, 1, 2, 2, 2, 5, 'a'}, "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeEntry(tt.data)
			if !errors.Is(err, errMalformed) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("err = %v, want %q", err, tt.text)
			}
		})
	}
}

func FuzzDecodeEntry(f *testing.F) {
	ops := sampleOps()
	data := appendOpsEntryHeader(nil, 7, len(ops))
	for i := range ops {
		data = appendOp(data, &ops[i])
	}
	f.Add(data)
	f.Add(appendLeaderEntry(nil, leaderEntry{ID: "n1", RESP: "a", Forward: "b"}))
	f.Add(appendResults(nil, sampleResults()))
	f.Add(appendVersionEntry(nil, 2))
	f.Add(append([]byte{entryIgnorable | entryOps}, data[1:]...))
	f.Fuzz(func(t *testing.T, data []byte) {
		if e, err := decodeEntry(data); err == nil && e.typ == entryOps {
			again := appendOpsEntryHeader(nil, e.stamp, len(e.ops))
			for i := range e.ops {
				again = appendOp(again, &e.ops[i])
			}
			if e2, err := decodeEntry(again); err != nil || !reflect.DeepEqual(e2.ops, e.ops) {
				t.Fatalf("re-encoding changed the ops: %v", err)
			}
		}
		rs := make([]engine.Result, 4)
		_ = decodeResults(data, rs)
		d := newDecoder(data)
		d.ops()
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
	}
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
	if err := decodeResults(appendResults(nil, in), out); err != nil {
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
	if err := decodeResults(appendResults(nil, in), make([]engine.Result, 2)); err == nil {
		t.Fatal("a results count mismatch was accepted")
	}
}

func TestReadFrame(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		ok   bool
	}{
		{"small", frame([]byte("hello")), true},
		{"large", frame(bytes.Repeat([]byte("x"), 300<<10)), true},
		{"too large", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, false},
		{"lying length", []byte{0xff, 0xff, 0xff, 0x0f, 'x'}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := readFrame(bufio.NewReader(bytes.NewReader(tt.data)), 64<<20)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v", err)
			}
			if tt.ok && !bytes.Equal(frame(p), tt.data) {
				t.Fatal("payload changed")
			}
		})
	}
}

// TestReadFrameInto: frames read into a buffer use its array when they
// fit (small frames only) and new memory otherwise, and read the same
// bytes as readFrame; writeFrame writes what frame builds.
func TestReadFrameInto(t *testing.T) {
	buf := make([]byte, 0, 16)
	for _, tt := range []struct {
		name    string
		payload []byte
		reuse   bool
	}{
		{"fits", []byte("hello"), true},
		{"empty", nil, true},
		{"grows", bytes.Repeat([]byte("y"), 100), false},
		{"large", bytes.Repeat([]byte("x"), 300<<10), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var w bytes.Buffer
			bw := bufio.NewWriter(&w)
			if err := writeFrame(bw, tt.payload); err != nil {
				t.Fatal(err)
			}
			if err := bw.Flush(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(w.Bytes(), frame(tt.payload)) {
				t.Fatal("writeFrame and frame differ")
			}
			p, err := readFrameInto(bufio.NewReader(&w), 64<<20, buf)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p, tt.payload) {
				t.Fatal("payload changed")
			}
			if reused := cap(p) > 0 && &p[:1][0] == &buf[:1][0]; reused != tt.reuse {
				t.Fatalf("buffer reused: %v, want %v", reused, tt.reuse)
			}
		})
	}
}

// TestErrorCodesRoundTrip: every error a leader answers a forwarded batch
// with comes back on the follower with its code and details (the very
// sentinel when it has none), and its class: CLUSTERDOWN (not applied) and
// UNCERTAIN (may have been) never mix.
func TestErrorCodesRoundTrip(t *testing.T) {
	for _, err := range []error{ErrLoading, ErrOutcomeUnknown, ErrShuttingDown, clusterDownError(2 * time.Second),
		clusterDownError(time.Minute), commitTimeoutError(time.Second), lostQuorumError(time.Second), errDuplicateBatch,
		errBadReply, errConnLost, internalError("%d results for %d operations", 1, 2)} {
		d := newDecoder(appendError(nil, err))
		back := d.codedError()
		if d.Err != nil || len(d.B) != 0 {
			t.Fatalf("%v: %v, %d bytes left", err, d.Err, len(d.B))
		}
		if wireError(back) != wireError(err) || !errors.Is(back, err) {
			t.Fatalf("%v came back as %v", err, back)
		}
		if e := errcode.Of(err); e.Detail == "" && e.Num == 0 && back != err {
			t.Fatalf("%v came back as another value", err)
		}
		if errors.Is(back, ErrClusterDown) && errors.Is(back, ErrUncertain) {
			t.Fatalf("%v: both CLUSTERDOWN and UNCERTAIN", err)
		}
		if errors.Is(back, ErrUncertain) != (errcode.Of(err).Code.Class() == errcode.MayHaveApplied) {
			t.Fatalf("%v: its code and its class differ", err)
		}
	}
	if !errors.Is(clusterDownError(time.Minute), ErrClusterDown) || errcode.Of(clusterDownError(time.Minute)).Num != int64(time.Minute) {
		t.Fatal("CLUSTERDOWN lost its identity or its timeout")
	}
	// A code this node does not know is malformed, never guessed at.
	d := newDecoder(appendError(nil, &errcode.Error{Code: errcode.NumCodes}))
	if d.codedError(); !errors.Is(d.Err, errMalformed) {
		t.Fatalf("unknown code: %v", d.Err)
	}
}
