package persistence

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// collRecords are one hash, sorted set and list, with and without expiry,
// empty elements and a large collection among them.
func collRecords() []engine.Record {
	big := engine.Record{Key: []byte("big"), Rule: engine.Rule{Kind: engine.KindList}}
	for i := range 100_000 {
		big.Elems = append(big.Elems, []byte(strings.Repeat("x", i%17)))
	}
	return []engine.Record{
		{Key: []byte("h"), Rule: engine.Rule{Kind: engine.KindHash}, A: now/1e6 + 5000,
			Elems: [][]byte{[]byte("tokens"), []byte("10"), []byte(""), []byte("empty field")}},
		{Key: []byte("z"), Rule: engine.Rule{Kind: engine.KindZSet},
			Elems: [][]byte{[]byte("a"), []byte("b"), []byte("")}, Scores: []float64{math.Inf(-1), 1.5, math.Inf(1)}},
		{Key: []byte("l"), Rule: engine.Rule{Kind: engine.KindList}, Elems: [][]byte{[]byte("x"), []byte(""), []byte("x")}},
		big,
	}
}

// TestCollectionsRoundTrip: format 4 keeps collections byte for byte, and
// format 3 refuses to write them.
func TestCollectionsRoundTrip(t *testing.T) {
	recs := collRecords()
	_, got, err := decodeAll(bytes.NewReader(encode(t, sampleHeader(), recs)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, recs) {
		t.Fatalf("round trip changed the records")
	}
	h := sampleHeader()
	h.Format = 3
	var buf bytes.Buffer
	if err := Encode(&buf, h, func(int) []engine.Record { return recs[:1] }, 1); err == nil {
		t.Fatal("format 3 wrote a hash")
	}
	// A record claiming more elements than its bytes is corrupt, not a
	// large allocation.
	b := encode(t, sampleHeader(), recs[2:3])
	i := bytes.Index(b, []byte("l\x03"))
	if i < 0 {
		t.Fatal("list record not found")
	}
	bad := bytes.Clone(b)
	bad[i+1] = 0x7f
	if _, _, err := decodeAll(bytes.NewReader(bad)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt count: %v", err)
	}
}

// TestLargeCollectionChunks: a collection larger than a chunk is written
// as several records and read back as one, a hash's fields with their
// values, with the records around it intact.
func TestLargeCollectionChunks(t *testing.T) {
	mb := bytes.Repeat([]byte{'v'}, 1<<20)
	h := engine.Record{Key: []byte("bighash"), Rule: engine.Rule{Kind: engine.KindHash}, A: now/1e6 + 1}
	z := engine.Record{Key: []byte("bigzset"), Rule: engine.Rule{Kind: engine.KindZSet}}
	for i := range 41 {
		h.Elems = append(h.Elems, []byte("f"+strings.Repeat("x", i)), mb)
		z.Elems = append(z.Elems, append([]byte{byte(i)}, mb...))
		z.Scores = append(z.Scores, float64(i))
	}
	recs := []engine.Record{collRecords()[0], h, z, collRecords()[2]}
	var buf bytes.Buffer
	enc, err := NewEncoder(&buf, sampleHeader())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := enc.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if enc.records <= uint64(len(recs)) {
		t.Fatalf("%d records written: the large collections were not split", enc.records)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	_, got, err := decodeAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, recs) {
		t.Fatalf("read back %d records, differing from the %d written", len(got), len(recs))
	}
}
