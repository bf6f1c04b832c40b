package engine

import (
	"bytes"
	"testing"
)

func getIn(t *testing.T, e *Engine, db uint8, key string) string {
	t.Helper()
	var r [1]Result
	e.Apply(1, []Op{{Code: OpGet, Key: []byte(key), DB: db}}, r[:])
	if r[0].Kind != KindString {
		return "<nil>"
	}
	return string(r[0].Value)
}

// TestDatabases: a key is one key per database; FLUSHDB, FLUSHALL,
// SWAPDB, MOVE; the limits count every database; snapshots and digests
// carry them.
func TestDatabases(t *testing.T) {
	e := New(Config{Stripes: 4, MaxKeys: 5})
	var r [8]Result
	e.Apply(1, []Op{
		{Code: OpSet, Key: []byte("k"), Value: []byte("zero")},
		{Code: OpSet, Key: []byte("k"), Value: []byte("one"), DB: 1},
		{Code: OpSet, Key: []byte("j"), Value: []byte("one"), DB: 1},
		{Code: OpDecide, Key: []byte("lim"), Rule: Rule{Kind: KindToken, Limit: 5, Period: 1e12}, Cost: 1, DB: 15},
		{Code: OpCount, DB: 1},
		{Code: OpCount},
	}, r[:])
	if getIn(t, e, 0, "k") != "zero" || getIn(t, e, 1, "k") != "one" || getIn(t, e, 2, "k") != "<nil>" {
		t.Fatalf("k per database: %q %q %q", getIn(t, e, 0, "k"), getIn(t, e, 1, "k"), getIn(t, e, 2, "k"))
	}
	if r[4].Count != 2 || r[5].Count != 1 {
		t.Fatalf("DBSIZE of 1 and 0: %d %d", r[4].Count, r[5].Count)
	}
	if e.Len() != 4 {
		t.Fatalf("Len %d, want 4 (every database)", e.Len())
	}
	// --max-keys counts every database: 4 held, one more fits, then none.
	e.Apply(1, []Op{
		{Code: OpSet, Key: []byte("a"), Value: []byte("x"), DB: 7},
		{Code: OpSet, Key: []byte("b"), Value: []byte("x"), DB: 8},
	}, r[:2])
	if r[0].Err != nil || r[1].Err == nil {
		t.Fatalf("max-keys over databases: %v, %v", r[0].Err, r[1].Err)
	}
	// The digest and the snapshot shards carry the databases.
	d1, n1 := e.Digest()
	f := New(Config{Stripes: 4, MaxKeys: 5})
	for i := range e.ExportShards() {
		for _, rec := range e.ExportStripe(i, 1) {
			if err := f.Import(rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.SetClockState(e.ClockState())
	if d2, n2 := f.Digest(); d1 != d2 || n1 != n2 || n1 != 5 {
		t.Fatalf("digest after export/import: %x (%d keys) vs %x (%d)", d1, n1, d2, n2)
	}
	// MOVE: absent from the source or present at the destination: 0.
	e.Apply(1, []Op{
		{Code: OpMove, Key: []byte("k"), DB: 0, Count: 1},
		{Code: OpMove, Key: []byte("nope"), DB: 0, Count: 1},
		{Code: OpMove, Key: []byte("j"), DB: 1, Count: 2},
		{Code: OpMove, Key: []byte("lim"), DB: 15, Count: 0},
	}, r[:4])
	if r[0].Count != 0 || r[1].Count != 0 || r[2].Count != 1 || r[3].Count != 1 {
		t.Fatalf("MOVE results %d %d %d %d", r[0].Count, r[1].Count, r[2].Count, r[3].Count)
	}
	if getIn(t, e, 2, "j") != "one" || getIn(t, e, 1, "j") != "<nil>" {
		t.Fatal("MOVE j 1 -> 2 did not move it")
	}
	e.Apply(1, []Op{{Code: OpPeek, Key: []byte("lim")}}, r[:1])
	if r[0].Kind != KindToken || r[0].Remaining != 4 {
		t.Fatalf("the moved limiter: %+v", r[0])
	}
	// SWAPDB 0 1: each one's keys become the other's.
	e.Apply(1, []Op{{Code: OpSwapDB, DB: 0, Count: 1}}, r[:1])
	if getIn(t, e, 0, "k") != "one" || getIn(t, e, 1, "k") != "zero" {
		t.Fatalf("after SWAPDB 0 1: k is %q in 0, %q in 1", getIn(t, e, 0, "k"), getIn(t, e, 1, "k"))
	}
	// FLUSHDB 1 leaves the others; FLUSHALL takes every one.
	e.Apply(1, []Op{{Code: OpFlushDB, DB: 1}, {Code: OpCount, DB: 1}, {Code: OpCount, DB: 2}}, r[:3])
	if r[0].Count != 2 || r[1].Count != 0 || r[2].Count != 1 {
		t.Fatalf("FLUSHDB: %d, then DBSIZE %d and %d", r[0].Count, r[1].Count, r[2].Count)
	}
	e.Apply(1, []Op{{Code: OpFlush}}, r[:1])
	if e.Len() != 0 || r[0].Count != 3 {
		t.Fatalf("FLUSHALL removed %d, left %d keys", r[0].Count, e.Len())
	}
}

// TestWatchAcrossDatabases: a WATCH of k in database 1 sees a change of k
// there, not one of k in database 0; SWAPDB and MOVE count as changes.
func TestWatchAcrossDatabases(t *testing.T) {
	e := New(Config{})
	var r [3]Result
	stamp := func(db uint8, key string) []byte {
		e.Apply(1, []Op{{Code: OpWatch, Key: []byte(key), DB: db}}, r[:1])
		return WatchStamp(&r[0], db)
	}
	check := func(key string, st []byte) bool {
		e.Apply(1, []Op{{Code: OpWatchCheck, Key: []byte(key), Args: [][]byte{[]byte(key), st}}}, r[:1])
		return r[0].Count == 1
	}
	s1 := stamp(1, "k")
	e.Apply(1, []Op{{Code: OpSet, Key: []byte("k"), Value: []byte("x")}}, r[:1])
	if !check("k", s1) {
		t.Error("a change of k in database 0 failed the check of k in 1")
	}
	e.Apply(1, []Op{{Code: OpSet, Key: []byte("k"), Value: []byte("x"), DB: 1}}, r[:1])
	if check("k", s1) {
		t.Error("a change of k in database 1 passed its check")
	}
	// SWAPDB touches a watched key that exists in either database, as
	// Redis: not one absent from both.
	s2 := stamp(2, "k")
	e.Apply(1, []Op{{Code: OpSwapDB, DB: 2, Count: 5}}, r[:1])
	if !check("k", s2) {
		t.Error("SWAPDB of databases without k failed the check")
	}
	s2 = stamp(2, "k")
	e.Apply(1, []Op{{Code: OpSwapDB, DB: 2, Count: 1}}, r[:1])
	if check("k", s2) {
		t.Error("SWAPDB bringing k into its database passed the check")
	}
	e.Apply(1, []Op{{Code: OpSwapDB, DB: 2, Count: 1}}, r[:1])
	s3 := stamp(1, "k")
	e.Apply(1, []Op{{Code: OpMove, Key: []byte("k"), DB: 1, Count: 3}}, r[:1])
	if r[0].Count != 1 || check("k", s3) {
		t.Error("MOVE of the key passed the check")
	}
	if !bytes.Equal(s3[9:], []byte{1}) {
		t.Errorf("stamp's database byte %v", s3[9:])
	}
}
