package persistence

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// FuzzDecodeSnapshot feeds arbitrary bytes to Decode: it must never panic,
// every error must be classified, and whatever decodes must encode back to
// a stream that decodes to the same records.
func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(encode(f, Header{}, nil))
	f.Add(encode(f, sampleHeader(), sampleRecords()[:6]))
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		var recs []engine.Record
		h, err := Decode(bytes.NewReader(data), func(rec engine.Record) error {
			recs = append(recs, rec)
			return nil
		})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTruncated) &&
				!errors.Is(err, ErrNotSnapshot) && !errors.Is(err, ErrVersion) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		again := encode(t, h, recs)
		_, recs2, err := decodeAll(bytes.NewReader(again))
		if err != nil || len(recs2) != len(recs) {
			t.Fatalf("re-encoded snapshot: %d of %d records, %v", len(recs2), len(recs), err)
		}
	})
}
