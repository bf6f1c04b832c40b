package cluster

import (
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/engine"
)

// TestSnapshotDatabasesAndWatches: a snapshot carries every database's
// keys and the WATCH table, so a replica restored from it has the same
// digest and decides a watch check as the others: a key watched before
// the snapshot and unchanged passes, one changed fails.
func TestSnapshotDatabasesAndWatches(t *testing.T) {
	f := newFSM(engine.New(engine.Config{Stripes: 4}), testLogger(t), nil)
	f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: codec.AppendVersionEntry(nil, SupportedVersion)})
	now := int64(1_000_000_000_000)
	var r [8]engine.Result
	f.eng.Apply(now, []engine.Op{
		{Code: engine.OpSet, Key: []byte("k"), Value: []byte("zero")},
		{Code: engine.OpSet, Key: []byte("k"), Value: []byte("one"), DB: 1},
		{Code: engine.OpSet, Key: []byte("j"), Value: []byte("fifteen"), DB: 15},
		{Code: engine.OpWatch, Key: []byte("k"), DB: 1},
		{Code: engine.OpWatch, Key: []byte("j"), DB: 15},
	}, r[:5])
	stampK, stampJ := engine.WatchStamp(&r[3], 1), engine.WatchStamp(&r[4], 15)
	f.eng.Apply(now, []engine.Op{{Code: engine.OpSet, Key: []byte("j"), Value: []byte("x"), DB: 15}}, r[:1])
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := s.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := newFSM(engine.New(engine.Config{Stripes: 4}), testLogger(t), nil)
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	d1, n1 := f.eng.Digest()
	d2, n2 := g.eng.Digest()
	if d1 != d2 || n1 != 3 || n2 != 3 {
		t.Fatalf("digests %x (%d keys), restored %x (%d)", d1, n1, d2, n2)
	}
	for _, e := range []*engine.Engine{f.eng, g.eng} {
		e.Apply(now, []engine.Op{
			{Code: engine.OpWatchCheck, Key: []byte("k"), Args: [][]byte{[]byte("k"), stampK}},
			{Code: engine.OpWatchCheck, Key: []byte("j"), Args: [][]byte{[]byte("j"), stampJ}},
			{Code: engine.OpGet, Key: []byte("k"), DB: 1},
		}, r[:3])
		if r[0].Count != 1 || r[1].Count != 0 || string(r[2].Value) != "one" {
			t.Fatalf("checks %d %d (want 1 0), GET k in db 1 %q", r[0].Count, r[1].Count, r[2].Value)
		}
	}
}
