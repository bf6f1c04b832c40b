package codec

import (
	"encoding/hex"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// TestTypedOpFieldsKeepTheWire: OpScan's Count and the clock ops' Clock
// travel in the cost field Op.Cost filled before they existed (costField):
// these ops encode to the bytes a build before them wrote for the same ops
// with Cost (recorded from commit dfba895), and those bytes decode into the
// typed fields.
func TestTypedOpFieldsKeepTheWire(t *testing.T) {
	ops := []engine.Op{
		{Code: engine.OpScan, Cursor: 7, Count: 10},
		{Code: engine.OpTimeWarp, Clock: int64(time.Hour)},
		{Code: engine.OpClockFreeze, Clock: 1893456000000000000},
		{Code: engine.OpClockFreeze},
		{Code: engine.OpDecide, Key: []byte("k"), Cost: -3},
		{Code: engine.OpIncrBy, Key: []byte("s"), Cost: 5},
	}
	const old = "06080614070b028080c58bc6d1010c028080a8dde68cf4c6340c00010a05016b160a0a0173"
	if got := hex.EncodeToString(AppendOps(nil, ops)); got != old {
		t.Fatalf("encoded %s\nwant    %s", got, old)
	}
	raw, _ := hex.DecodeString(old)
	d := NewDecoder(raw)
	if got := d.Ops(); d.Err != nil || !reflect.DeepEqual(got, ops) {
		t.Fatalf("decoded %+v (%v)\nwant %+v", got, d.Err, ops)
	}
}
