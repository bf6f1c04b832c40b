package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"math"
	"slices"
)

// Digest returns a hash of the engine's whole replicated state, and the
// number of keys in it: the clock's state, then every key's record as
// ExportStripe gives it at the clock's last time (states back at their
// initial state are left out: they are indistinguishable from absent
// ones, whatever the local sweeper did), in stripe and key order. Replicas
// that applied the same log have the same digest. It is not an atomic
// snapshot of the engine: take it while nothing is being applied (the
// chaos test compares replicas this way, through DEBUG DIGEST).
func (e *Engine) Digest() (sum [sha256.Size]byte, keys int) {
	h := sha256.New()
	var buf []byte
	word := func(v int64) { buf = binary.BigEndian.AppendUint64(buf, uint64(v)) }
	cs := e.ClockState()
	frozen := int64(0)
	if cs.Frozen {
		frozen = 1
	}
	word(cs.Offset)
	word(frozen)
	word(cs.FrozenAt)
	word(cs.Last)
	for i := range e.ExportShards() {
		recs := e.ExportStripe(i, cs.Last)
		slices.SortFunc(recs, func(a, b Record) int { return bytes.Compare(a.Key, b.Key) })
		for _, r := range recs {
			if r.DB != 0 {
				// Database 0's keys hash as before databases.
				word(-1 - int64(r.DB))
			}
			word(int64(len(r.Key)))
			buf = append(buf, r.Key...)
			word(int64(r.Rule.Kind))
			word(r.Rule.Limit)
			word(r.Rule.Period)
			word(r.A)
			word(r.B)
			word(r.C)
			word(int64(len(r.Log)))
			for _, ts := range r.Log {
				word(ts)
			}
			if kindOf(r.Rule.Kind).shape == inValue {
				word(int64(len(r.Value)))
				buf = append(buf, r.Value...)
			}
			if kindOf(r.Rule.Kind).shape == inColl {
				word(int64(len(r.Elems)))
				for _, el := range r.Elems {
					word(int64(len(el)))
					buf = append(buf, el...)
				}
				for _, sc := range r.Scores {
					word(int64(math.Float64bits(sc)))
				}
			}
			if kindOf(r.Rule.Kind).shape == inLeases {
				word(int64(len(r.Leases)))
				for _, l := range r.Leases {
					word(int64(len(l.Token)))
					buf = append(buf, l.Token...)
					word(l.Units)
					word(l.Expiry)
				}
			}
			h.Write(buf)
			buf = buf[:0]
		}
		keys += len(recs)
	}
	// The loaded scripts, after the keys and only when there are some, so
	// that a digest without scripts is what it was before them.
	for _, body := range e.Scripts() {
		word(int64(len(body)))
		buf = append(buf, body...)
	}
	h.Write(buf)
	h.Sum(sum[:0])
	return sum, keys
}
