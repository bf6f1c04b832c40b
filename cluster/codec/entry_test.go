package codec

import (
	"encoding/hex"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
)

var tokenRule = engine.Rule{Kind: engine.KindToken, Limit: 5, Period: int64(time.Hour)}

func decide(key string, rule engine.Rule, cost int64) engine.Op {
	return engine.Op{Code: engine.OpDecide, Key: []byte(key), Rule: rule, Cost: cost}
}

// errDuplicateBatch stands for cluster's sentinel of that code: a value
// DecodeResults must hand back as is.
var errDuplicateBatch error = errcode.New(errcode.DuplicateBatch)

// testSentinels is a sentinel table as cluster's (errors.go) holds one.
var testSentinels = Sentinels{engine.ErrWrongType, engine.ErrClockBackwards, engine.ErrBadRule, engine.ErrOOM,
	engine.ErrKeyLimit, engine.ErrDuplicateKey, errDuplicateBatch}

// batchEntry encodes a batch entry of the given requests.
func batchEntry(stamp int64, ids []BatchID, reqs [][]engine.Op) []byte {
	n := 0
	for _, r := range reqs {
		n += len(r)
	}
	b := AppendBatchEntryHeader(nil, stamp, n, len(reqs))
	for i, r := range reqs {
		b = AppendBatchRequest(b, ids[i], len(r))
		for j := range r {
			b = AppendOp(b, &r[j])
		}
	}
	return b
}

func testID(n byte) BatchID { return BatchID{15: n, 0: 0xab} }

func TestBatchEntryRoundTrip(t *testing.T) {
	ops := sampleOps()
	reqs := [][]engine.Op{ops[:2], ops[2:3], ops[3:]}
	ids := []BatchID{{}, testID(1), testID(2)}
	data := batchEntry(-7, ids, reqs)
	e, err := DecodeEntryInto(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Type != EntryBatch || e.Stamp != -7 || !reflect.DeepEqual(e.Ops, ops) {
		t.Fatalf("decoded %+v", e)
	}
	want := []Span{{ID: BatchID{}, Off: 0, N: 2}, {ID: testID(1), Off: 2, N: 1}, {ID: testID(2), Off: 3, N: len(ops) - 3}}
	if !reflect.DeepEqual(e.Spans, want) {
		t.Fatalf("spans %+v, want %+v", e.Spans, want)
	}

	one := []engine.Op{decide("k", tokenRule, 1)}
	good := batchEntry(1, []BatchID{testID(1)}, [][]engine.Op{one})
	hdr := AppendBatchEntryHeader(nil, 1, 1, 1)
	bad := []struct {
		name string
		data []byte
		text string
	}{
		{"truncated id", append(append([]byte{}, hdr...), reqForwarded, 1, 2, 3), "truncated batch id"},
		{"unknown flag", append(append([]byte{}, hdr...), 7, 1, 1, 0), "unknown flag"},
		{"count too large", append(AppendBatchEntryHeader(nil, 1, 1, 1), AppendOps(AppendBatchRequest(nil, BatchID{}, 0)[:1], []engine.Op{one[0], one[0]})...), "requests hold more"},
		{"fewer ops than the entry says", append(AppendBatchEntryHeader(nil, 1, 2, 1), AppendOps([]byte{reqLocal}, one)...), "the entry says 2"},
		{"stray byte", append(append([]byte{}, good...), 0), "stray"},
		{"truncated", good[:len(good)-1], "truncated"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeEntryInto(tt.data, nil, nil)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("err = %v, want one naming %q", err, tt.text)
			}
		})
	}
}

// TestOldEntryDecodes: an ops entry as the first release wrote it
// (testdata/entry_v1.hex, which cluster's TestOldEntryStillApplies also
// applies) decodes into the ops it held, and encodes back to the same
// bytes.
func TestOldEntryDecodes(t *testing.T) {
	raw, err := os.ReadFile("testdata/entry_v1.hex")
	if err != nil {
		t.Fatal(err)
	}
	data, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	e, err := DecodeEntryInto(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []engine.Op{decide("old", tokenRule, 2), decide("old", tokenRule, 1)}
	if e.Type != EntryOps || e.Ignorable || e.Stamp != 1_700_000_000_000_000_000 || !reflect.DeepEqual(e.Ops, want) {
		t.Fatalf("decoded %+v", e)
	}
	again := AppendOpsEntryHeader(nil, e.Stamp, len(e.Ops))
	for i := range e.Ops {
		again = AppendOp(again, &e.Ops[i])
	}
	if !reflect.DeepEqual(again, data) {
		t.Fatalf("encoded %x\nwant    %x", again, data)
	}
}
