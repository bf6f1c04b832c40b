package codec

import (
	"encoding/hex"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// TestTypedOpFieldsKeepTheWire: the Op fields that took the place of
// Op.Cost and Op.Cursor in some ops (OpScan's Count, the clock ops'
// Clock, OpIncrBy's Delta, OpRateLimit's Shadow) travel in the slot the
// older field filled, as the op's row names (costField, cursorField):
// these ops encode to the bytes a build before them wrote for the same ops
// with Cost and Cursor (recorded from commits dfba895 and 1fbc553), and
// those bytes decode into the typed fields.
func TestTypedOpFieldsKeepTheWire(t *testing.T) {
	for _, tt := range []struct {
		ops []engine.Op
		old string
	}{
		{[]engine.Op{
			{Code: engine.OpScan, Cursor: 7, Count: 10},
			{Code: engine.OpTimeWarp, Clock: int64(time.Hour)},
			{Code: engine.OpClockFreeze, Clock: 1893456000000000000},
			{Code: engine.OpClockFreeze},
			{Code: engine.OpDecide, Key: []byte("k"), Cost: -3},
			{Code: engine.OpIncrBy, Key: []byte("s"), Delta: 5},
		}, "06080614070b028080c58bc6d1010c028080a8dde68cf4c6340c00010a05016b160a0a0173"},
		{[]engine.Op{{Code: engine.OpRateLimit, Shadow: 5, All: []engine.Limit{
			{Key: []byte("k"), Rule: engine.Rule{Kind: engine.KindFixed, Limit: 10, Period: 1e9}, Cost: 1},
		}}}, "0128440501031480a8d6b90702016b"},
	} {
		if got := hex.EncodeToString(AppendOps(nil, tt.ops)); got != tt.old {
			t.Fatalf("encoded %s\nwant    %s", got, tt.old)
		}
		raw, _ := hex.DecodeString(tt.old)
		d := NewDecoder(raw)
		if got := d.Ops(); d.Err != nil || !reflect.DeepEqual(got, tt.ops) {
			t.Fatalf("decoded %+v (%v)\nwant %+v", got, d.Err, tt.ops)
		}
	}
}

// TestTypedResultFieldsKeepTheWire: Result's TTL and Time, which took the
// place of Count in OpTTL's, OpTime's, OpExpireTime's and OpRateLimit's
// results, travel in the count field as the op's row names (countField):
// the bytes a build before them wrote for the same results with Count
// (recorded from commit 1fbc553), decoded back into the typed fields.
func TestTypedResultFieldsKeepTheWire(t *testing.T) {
	ops := []engine.Op{{Code: engine.OpTTL}, {Code: engine.OpTTL}, {Code: engine.OpTime}, {Code: engine.OpRateLimit}}
	rs := []engine.Result{
		{TTL: -2},
		{Kind: engine.KindString, TTL: 1500},
		{Time: 1_700_000_000_000_000_000},
		{Allowed: true, Time: 1_700_000_000_000_000_000, Each: []engine.Result{{Kind: engine.KindFixed, Allowed: true, Limit: 10, Remaining: 9}}},
	}
	const old = "04800103820108b81780018080d0e2c6bfce972f84098080d0e2c6bfce972f011e031412"
	if got := hex.EncodeToString(AppendResults(nil, ops, rs)); got != old {
		t.Fatalf("encoded %s\nwant    %s", got, old)
	}
	raw, _ := hex.DecodeString(old)
	got := make([]engine.Result, len(rs))
	if err := DecodeResults(raw, ops, got, testSentinels); err != nil || !reflect.DeepEqual(got, rs) {
		t.Fatalf("decoded %+v (%v)\nwant %+v", got, err, rs)
	}
}
