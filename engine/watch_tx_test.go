package engine

import "testing"

// watchStamp runs OpWatch for key at now and returns its stamp.
func watchStamp(t *testing.T, e *Engine, now int64, key string) []byte {
	t.Helper()
	var r [1]Result
	e.Apply(now, []Op{{Code: OpWatch, Key: []byte(key)}}, r[:])
	if r[0].Err != nil || r[0].Cursor == 0 {
		t.Fatalf("WATCH %s: %+v", key, r[0])
	}
	return WatchStamp(&r[0], 0)
}

// execWatched runs a check of key's stamp then SET tx 1, and reports
// whether the transaction ran (and checks that the SET ran with it).
func execWatched(t *testing.T, e *Engine, now int64, key string, stamp []byte) bool {
	t.Helper()
	var r [3]Result
	e.Apply(now, []Op{
		{Code: OpDelete, Key: []byte("tx")},
		{Code: OpWatchCheck, Key: []byte(key), Args: [][]byte{[]byte(key), stamp}, Count: 1},
		{Code: OpSet, Key: []byte("tx"), Value: []byte("1")},
	}, r[:])
	e.Apply(now, []Op{{Code: OpExists, Key: []byte("tx")}}, r[:1])
	ran := r[0].Count == 1
	return ran
}

// TestWatchCheck: a watched key's change, by any op, its deletion, its
// expiry or a flush, make the check fail and skip the transaction's ops;
// a change of another key, a failed SET NX or a read do not.
func TestWatchCheck(t *testing.T) {
	now := int64(1_000_000_000_000)
	cases := []struct {
		name    string
		between []Op
		ran     bool
	}{
		{"nothing", nil, true},
		{"a read", []Op{{Code: OpGet, Key: []byte("k")}}, true},
		{"another key", []Op{{Code: OpSet, Key: []byte("other"), Value: []byte("x")}}, true},
		{"SET NX that did not set", []Op{{Code: OpSet, Key: []byte("k"), Value: []byte("x"), Flags: StrNX}}, true},
		{"SET", []Op{{Code: OpSet, Key: []byte("k"), Value: []byte("v0")}}, false},
		{"INCRBY", []Op{{Code: OpIncrBy, Key: []byte("n"), Delta: 1}}, true},
		{"DEL", []Op{{Code: OpDelete, Key: []byte("k")}}, false},
		{"EXPIRE", []Op{{Code: OpExpire, Key: []byte("k"), Expire: 10, Flags: StrExpireRel}}, false},
		{"FLUSHALL", []Op{{Code: OpFlush}}, false},
		{"RL.TOKEN on it (WRONGTYPE: no change)", []Op{{Code: OpDecide, Key: []byte("k"), Rule: Rule{Kind: KindToken, Limit: 5, Period: 1e9}, Cost: 1}}, true},
		{"SET replacing it by the same value", []Op{{Code: OpSet, Key: []byte("k"), Value: []byte("v0")}}, false},
	}
	for _, c := range cases {
		e := New(Config{})
		var r [4]Result
		e.Apply(now, []Op{{Code: OpSet, Key: []byte("k"), Value: []byte("v0")}}, r[:1])
		stamp := watchStamp(t, e, now, "k")
		if len(c.between) > 0 {
			e.Apply(now, c.between, r[:len(c.between)])
		}
		if got := execWatched(t, e, now, "k", stamp); got != c.ran {
			t.Errorf("%s between WATCH and EXEC: ran %v, want %v", c.name, got, c.ran)
		}
	}

	// Expiry: a key live at its WATCH that expires before EXEC.
	e := New(Config{})
	var r [2]Result
	e.Apply(now, []Op{{Code: OpSet, Key: []byte("k"), Value: []byte("v"), Expire: 100, Flags: StrExpireRel}}, r[:1])
	stamp := watchStamp(t, e, now, "k")
	if execWatched(t, e, now+200*1e6, "k", stamp) {
		t.Error("a watched key expired before EXEC: the transaction ran")
	}
	// A lease that ended counts as a change; so does a stamp never given.
	stamp = watchStamp(t, e, now, "j")
	if execWatched(t, e, now+2*watchLease, "j", stamp) {
		t.Error("a registration whose lease ended: the transaction ran")
	}
	e.Apply(now, []Op{{Code: OpDecide, Key: []byte("lim"), Rule: Rule{Kind: KindToken, Limit: 5, Period: 1e9}, Cost: 1}}, r[:1])
	stamp = watchStamp(t, e, now, "lim")
	e.Apply(now, []Op{{Code: OpDecide, Key: []byte("lim"), Rule: Rule{Kind: KindToken, Limit: 5, Period: 1e9}, Cost: 1}}, r[:1])
	if execWatched(t, e, now+2*watchLease, "lim", stamp) {
		t.Error("a watched limiter key was charged: the transaction ran")
	}
	if execWatched(t, e, now, "j", []byte("bad")) {
		t.Error("a malformed stamp: the transaction ran")
	}
}

// TestWatchTableInSnapshots: ExportWatches and ImportWatches carry the
// registrations, so a restored replica decides every check as the others.
func TestWatchTableInSnapshots(t *testing.T) {
	now := int64(1_000_000_000_000)
	e := New(Config{})
	stamps := map[string][]byte{}
	for _, k := range []string{"a", "b", "c"} {
		stamps[k] = watchStamp(t, e, now, k)
	}
	var r [1]Result
	e.Apply(now, []Op{{Code: OpSet, Key: []byte("b"), Value: []byte("x")}}, r[:])
	chunks := e.ExportWatches(now)
	f := New(Config{})
	for i, ch := range chunks {
		if err := f.ImportWatches(ch, i == 0); err != nil {
			t.Fatal(err)
		}
	}
	f.Apply(now, []Op{{Code: OpSet, Key: []byte("b"), Value: []byte("x")}}, r[:])
	for k, want := range map[string]bool{"a": true, "b": false, "c": true} {
		if got := execWatched(t, f, now, k, stamps[k]); got != want {
			t.Errorf("restored: check of %s ran %v, want %v", k, got, want)
		}
	}
	// A new registration after the restore gets a version never given.
	if v := watchStamp(t, f, now, "d"); string(v[:8]) <= string(stamps["c"][:8]) {
		t.Errorf("version after restore %x not above %x", v[:8], stamps["c"][:8])
	}
	if err := f.ImportWatches([]byte{1, 2}, true); err == nil {
		t.Error("ImportWatches took a malformed chunk")
	}
}
