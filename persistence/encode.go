package persistence

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"

	"github.com/sluice-rl/sluice/engine"
)

// Encoder writes one snapshot stream. Create it with NewEncoder, call Write
// for every record, then Close. An Encoder is not safe for concurrent use.
type Encoder struct {
	w       *bufio.Writer
	base    int64
	block   []byte // payload of the open block, after its record count
	nblock  uint64 // records in the open block
	records uint64
	blocks  uint64
	scratch []byte
	err     error // sticky
	closed  bool
	kinds   byte // the highest kind the stream's format holds
	hasDB   bool // the format's blocks name their database (version 4)
	db      uint8
}

// NewEncoder writes the magic, version and header to w and returns an
// Encoder for the records. Nothing is flushed to w until a block fills or
// Close is called.
func NewEncoder(w io.Writer, h Header) (*Encoder, error) {
	if len(h.Meta) > MaxMeta {
		return nil, fmt.Errorf("persistence: encode header: %d meta pairs, at most %d", len(h.Meta), MaxMeta)
	}
	for _, kv := range h.Meta {
		if len(kv[0]) > MaxMetaLen || len(kv[1]) > MaxMetaLen {
			return nil, fmt.Errorf("persistence: encode header: meta %q longer than %d bytes", kv[0], MaxMetaLen)
		}
	}
	format := h.Format
	if format == 0 {
		format = Version
	}
	if format < minVersion || format > Version {
		return nil, fmt.Errorf("persistence: encode: format version %d (this build writes versions %d to %d)", format, minVersion, Version)
	}
	e := &Encoder{w: bufio.NewWriterSize(w, 256<<10), base: h.Clock.Last, kinds: maxKindIn(uint64(format)), hasDB: format >= 4}
	if _, err := e.w.WriteString(Magic); err != nil {
		return nil, fmt.Errorf("persistence: write magic: %w", err)
	}
	e.scratch = binary.AppendUvarint(e.scratch[:0], uint64(format))
	if _, err := e.w.Write(e.scratch); err != nil {
		return nil, fmt.Errorf("persistence: write version: %w", err)
	}
	p := make([]byte, 0, 64)
	p = binary.AppendVarint(p, h.Clock.Offset)
	if h.Clock.Frozen {
		p = append(p, 1)
	} else {
		p = append(p, 0)
	}
	p = binary.AppendVarint(p, h.Clock.FrozenAt)
	p = binary.AppendVarint(p, h.Clock.Last)
	p = binary.AppendUvarint(p, uint64(len(h.Meta)))
	for _, kv := range h.Meta {
		p = appendString(p, kv[0])
		p = appendString(p, kv[1])
	}
	if err := e.writeFrame(frameHeader, p); err != nil {
		return nil, fmt.Errorf("persistence: write header: %w", err)
	}
	e.block = make([]byte, 0, blockTarget+blockTarget/4)
	return e, nil
}

// Write adds one record. The record is encoded at once; rec may be reused
// after Write returns.
func (e *Encoder) Write(rec engine.Record) error {
	if e.err != nil {
		return e.err
	}
	if e.closed {
		return errors.New("persistence: write after Close")
	}
	if err := checkRecord(rec); err != nil {
		e.err = fmt.Errorf("persistence: record %d: %w", e.records, err)
		return e.err
	}
	if byte(rec.Rule.Kind) > e.kinds {
		e.err = fmt.Errorf("persistence: record %d: a %s key does not fit the stream's older format", e.records, rec.Rule.Kind)
		return e.err
	}
	if rec.DB != e.db {
		if !e.hasDB {
			e.err = fmt.Errorf("persistence: record %d: a key of database %d does not fit the stream's older format", e.records, rec.DB)
			return e.err
		}
		if e.nblock > 0 {
			if err := e.flushBlock(); err != nil {
				return err
			}
		}
		e.db = rec.DB
	}
	if isColl(rec.Rule.Kind) {
		return e.writeColl(rec)
	}
	return e.appendRec(rec, false)
}

// appendRec appends one record (a continuing chunk of a collection when
// cont) to the open block, closing the block when it is full.
func (e *Encoder) appendRec(rec engine.Record, cont bool) error {
	n := len(e.block)
	e.block = appendRecord(e.block, e.base, rec)
	if cont {
		e.block[n] |= flagLog
	}
	e.nblock++
	e.records++
	if len(e.block) >= blockTarget {
		return e.flushBlock()
	}
	return nil
}

// collChunk bounds the element bytes of one collection record: a larger
// collection is written as several records of the same key, the later
// ones marked as continuing it, so no frame exceeds MaxFrameLen.
const collChunk = 16 << 20

// writeColl writes a collection record, in chunks if it is large.
func (e *Encoder) writeColl(rec engine.Record) error {
	step := 1
	if rec.Rule.Kind == engine.KindHash {
		step = 2 // a field stays with its value
	}
	first := true
	for start := 0; start < len(rec.Elems); {
		end, size := start, 0
		for end < len(rec.Elems) && (end == start || size+len(rec.Elems[end])+len(rec.Elems[end+step-1]) <= collChunk) {
			for j := end; j < end+step; j++ {
				size += len(rec.Elems[j]) + 10
			}
			end += step
		}
		chunk := rec
		chunk.Elems = rec.Elems[start:end]
		if rec.Scores != nil {
			chunk.Scores = rec.Scores[start:end]
		}
		if !first {
			chunk.A = 0
		}
		if err := e.appendRec(chunk, !first); err != nil {
			return err
		}
		first = false
		start = end
	}
	return nil
}

// Close writes the last block and the end frame and flushes everything to
// the underlying writer. It does not close that writer.
func (e *Encoder) Close() error {
	if e.err != nil {
		return e.err
	}
	if e.closed {
		return nil
	}
	e.closed = true
	if e.nblock > 0 {
		if err := e.flushBlock(); err != nil {
			return err
		}
	}
	p := binary.AppendUvarint(nil, e.records)
	p = binary.AppendUvarint(p, e.blocks)
	if err := e.writeFrame(frameEnd, p); err != nil {
		e.err = fmt.Errorf("persistence: write end: %w", err)
		return e.err
	}
	if err := e.w.Flush(); err != nil {
		e.err = fmt.Errorf("persistence: flush: %w", err)
		return e.err
	}
	return nil
}

// flushBlock writes the open block as one frame.
func (e *Encoder) flushBlock() error {
	// The payload is the database (version 4) and the record count
	// followed by the records: write them into scratch and checksum both
	// parts without copying the block.
	e.scratch = e.scratch[:0]
	if e.hasDB {
		e.scratch = binary.AppendUvarint(e.scratch, uint64(e.db))
	}
	e.scratch = binary.AppendUvarint(e.scratch, e.nblock)
	n := len(e.scratch) + len(e.block)
	if n > MaxFrameLen {
		e.err = fmt.Errorf("persistence: block of %d bytes exceeds %d", n, MaxFrameLen)
		return e.err
	}
	crc := crc32.Update(0, castagnoli, []byte{frameBlock})
	crc = crc32.Update(crc, castagnoli, e.scratch)
	crc = crc32.Update(crc, castagnoli, e.block)
	var hdr [1 + binary.MaxVarintLen64]byte
	hdr[0] = frameBlock
	h := binary.AppendUvarint(hdr[:1], uint64(n))
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], crc)
	for _, part := range [][]byte{h, e.scratch, e.block, sum[:]} {
		if _, err := e.w.Write(part); err != nil {
			e.err = fmt.Errorf("persistence: write block %d: %w", e.blocks, err)
			return e.err
		}
	}
	e.blocks++
	e.block = e.block[:0]
	e.nblock = 0
	return nil
}

// writeFrame writes one frame whose payload is p.
func (e *Encoder) writeFrame(typ byte, p []byte) error {
	var hdr [1 + binary.MaxVarintLen64]byte
	hdr[0] = typ
	h := binary.AppendUvarint(hdr[:1], uint64(len(p)))
	crc := crc32.Update(0, castagnoli, []byte{typ})
	crc = crc32.Update(crc, castagnoli, p)
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], crc)
	for _, part := range [][]byte{h, p, sum[:]} {
		if _, err := e.w.Write(part); err != nil {
			return err
		}
	}
	return nil
}

// Encode writes a whole snapshot: the header, then the records that
// shard(i) returns for i in [0, n), in that order.
func Encode(w io.Writer, h Header, shard func(i int) []engine.Record, n int) error {
	enc, err := NewEncoder(w, h)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		for _, rec := range shard(i) {
			if err := enc.Write(rec); err != nil {
				return err
			}
		}
	}
	return enc.Close()
}

// checkRecord rejects what Decode would reject, so that a snapshot that
// was written can always be read back.
func checkRecord(rec engine.Record) error {
	if rec.Rule.Kind == engine.KindNone || rec.Rule.Kind > maxKind {
		return fmt.Errorf("kind %d is not a limiter kind", rec.Rule.Kind)
	}
	if len(rec.Key) == 0 || len(rec.Key) > MaxKeyLen {
		return fmt.Errorf("key of %d bytes: must be 1..%d", len(rec.Key), MaxKeyLen)
	}
	if len(rec.Log) > MaxLogLen {
		return fmt.Errorf("log of %d timestamps: at most %d", len(rec.Log), MaxLogLen)
	}
	if len(rec.Leases) > 0 && rec.Rule.Kind != engine.KindConcurrency || len(rec.Log) > 0 && rec.Rule.Kind == engine.KindConcurrency {
		return fmt.Errorf("%s key with %d timestamps and %d leases", rec.Rule.Kind, len(rec.Log), len(rec.Leases))
	}
	if len(rec.Value) > 0 && rec.Rule.Kind != engine.KindString || len(rec.Value) > MaxValueLen {
		return fmt.Errorf("%s key with a value of %d bytes", rec.Rule.Kind, len(rec.Value))
	}
	if rec.Rule.Kind == engine.KindString && (len(rec.Log) > 0 || len(rec.Leases) > 0) {
		return fmt.Errorf("string key with timestamps or leases")
	}
	if isColl(rec.Rule.Kind) != (len(rec.Elems) > 0) || len(rec.Elems) > MaxElems ||
		(rec.Rule.Kind == engine.KindZSet) != (len(rec.Scores) > 0) || len(rec.Scores) > 0 && len(rec.Scores) != len(rec.Elems) {
		return fmt.Errorf("%s key with %d elements and %d scores", rec.Rule.Kind, len(rec.Elems), len(rec.Scores))
	}
	if isColl(rec.Rule.Kind) && (len(rec.Log) > 0 || len(rec.Leases) > 0 || len(rec.Value) > 0) {
		return fmt.Errorf("%s key with timestamps, leases or a value", rec.Rule.Kind)
	}
	for _, el := range rec.Elems {
		if len(el) > MaxValueLen {
			return fmt.Errorf("%s key with an element of %d bytes", rec.Rule.Kind, len(el))
		}
	}
	if len(rec.Leases) > MaxLogLen {
		return fmt.Errorf("%d leases: at most %d", len(rec.Leases), MaxLogLen)
	}
	for i, l := range rec.Leases {
		if len(l.Token) == 0 || len(l.Token) > engine.MaxToken {
			return fmt.Errorf("lease %d: token of %d bytes: must be 1..%d", i, len(l.Token), engine.MaxToken)
		}
	}
	return nil
}

// appendRecord appends rec's encoding to b.
func appendRecord(b []byte, base int64, rec engine.Record) []byte {
	flags := byte(rec.Rule.Kind) & flagKindMask
	a, fa := relative(rec.A, base)
	bb, fb := relative(rec.B, base)
	c, fc := relative(rec.C, base)
	if fa {
		flags |= flagADelta
	}
	if fb {
		flags |= flagBDelta
	}
	if fc {
		flags |= flagCDelta
	}
	if len(rec.Log) > 0 || len(rec.Leases) > 0 {
		flags |= flagLog
	}
	b = append(b, flags)
	b = binary.AppendVarint(b, rec.Rule.Limit)
	b = binary.AppendVarint(b, rec.Rule.Period)
	b = binary.AppendVarint(b, a)
	b = binary.AppendVarint(b, bb)
	b = binary.AppendVarint(b, c)
	b = binary.AppendUvarint(b, uint64(len(rec.Key)))
	b = append(b, rec.Key...)
	if rec.Rule.Kind == engine.KindString {
		b = binary.AppendUvarint(b, uint64(len(rec.Value)))
		return append(b, rec.Value...)
	}
	if isColl(rec.Rule.Kind) {
		b = binary.AppendUvarint(b, uint64(len(rec.Elems)))
		for i, el := range rec.Elems {
			b = binary.AppendUvarint(b, uint64(len(el)))
			b = append(b, el...)
			if rec.Rule.Kind == engine.KindZSet {
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(rec.Scores[i]))
			}
		}
		return b
	}
	if len(rec.Log) > 0 {
		b = binary.AppendUvarint(b, uint64(len(rec.Log)))
		prev := base
		for _, t := range rec.Log {
			b = binary.AppendVarint(b, t-prev) // wraps, and unwraps exactly
			prev = t
		}
	}
	if len(rec.Leases) > 0 {
		b = binary.AppendUvarint(b, uint64(len(rec.Leases)))
		prev := base
		for _, l := range rec.Leases {
			b = binary.AppendUvarint(b, uint64(len(l.Token)))
			b = append(b, l.Token...)
			b = binary.AppendVarint(b, l.Units)
			b = binary.AppendVarint(b, l.Expiry-prev)
			prev = l.Expiry
		}
	}
	return b
}

// relative returns x or x-base, whichever encodes shorter, and whether it
// chose the difference. Differences wrap around int64 and are undone
// exactly by the decoder's wrapping addition.
func relative(x, base int64) (int64, bool) {
	d := x - base
	if varintLen(d) < varintLen(x) {
		return d, true
	}
	return x, false
}

// varintLen is the length of binary.AppendVarint(nil, x).
func varintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	n := 1
	for ux >= 0x80 {
		ux >>= 7
		n++
	}
	return n
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
