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
	"github.com/sluice-rl/sluice/internal/cursor"
)

// Decode reads a snapshot stream from r, calls fn for every record in
// order, and returns the header once the end frame has been read and
// checked. Each Record's Key and Log are freshly allocated and belong to
// fn. A block's records are passed to fn only after the block's checksum
// has been verified, but a later block may still turn out to be corrupt:
// on error, the records already passed must be discarded by the caller.
//
// Errors wrap ErrNotSnapshot, ErrVersion, ErrTruncated or ErrCorrupt (or
// fn's error, or r's read error), and say where the problem was found.
func Decode(r io.Reader, fn func(engine.Record) error) (Header, error) {
	d := decoder{r: bufio.NewReaderSize(r, 256<<10)}
	h, err := d.decode(fn)
	if err != nil {
		return Header{}, fmt.Errorf("persistence: decode snapshot: %w", err)
	}
	return h, nil
}

type decoder struct {
	r      *bufio.Reader
	buf    []byte
	offset int64 // of the next unread byte, for error messages
}

func (d *decoder) decode(fn func(engine.Record) error) (Header, error) {
	var magic [len(Magic)]byte
	if n, err := io.ReadFull(d.r, magic[:]); err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return Header{}, fmt.Errorf("%w: empty stream", ErrNotSnapshot)
		}
		if string(magic[:n]) == Magic[:n] {
			return Header{}, fmt.Errorf("%w: %d bytes, in the magic", ErrTruncated, n)
		}
		return Header{}, fmt.Errorf("%w: bad magic", ErrNotSnapshot)
	}
	if string(magic[:]) != Magic {
		return Header{}, fmt.Errorf("%w: bad magic %q", ErrNotSnapshot, magic[:])
	}
	d.offset = int64(len(Magic))
	v, err := binary.ReadUvarint(d.r)
	if err != nil {
		return Header{}, d.readErr("version", err)
	}
	if v < minVersion || v > Version {
		return Header{}, fmt.Errorf("%w: version %d (this build reads versions %d to %d)", ErrVersion, v, minVersion, Version)
	}
	kinds := maxKindIn(v)
	d.offset++

	typ, p, err := d.frame()
	if err != nil {
		return Header{}, fmt.Errorf("header: %w", err)
	}
	if typ != frameHeader {
		return Header{}, fmt.Errorf("%w: first frame is %q, want the header", ErrCorrupt, typ)
	}
	h, err := parseHeader(p)
	if err != nil {
		return Header{}, fmt.Errorf("header: %w", err)
	}
	h.Format = int(v)

	var records, blocks uint64
	// A collection split into chunks is passed to fn whole: pending holds
	// the record until a record of another key (or the end) follows.
	var pending *engine.Record
	flush := func() error {
		if pending == nil {
			return nil
		}
		rec := *pending
		pending = nil
		return fn(rec)
	}
	merge := func(rec engine.Record) error {
		if rec.Log != nil && len(rec.Log) == 0 && isColl(rec.Rule.Kind) { // a continuation
			if pending == nil || string(pending.Key) != string(rec.Key) || pending.DB != rec.DB || pending.Rule != rec.Rule || rec.A != 0 {
				return fmt.Errorf("%w: a collection chunk that continues no record", ErrCorrupt)
			}
			if len(pending.Elems)+len(rec.Elems) > MaxElems {
				return fmt.Errorf("%w: a collection of more than %d elements", ErrCorrupt, MaxElems)
			}
			pending.Elems = append(pending.Elems, rec.Elems...)
			pending.Scores = append(pending.Scores, rec.Scores...)
			return nil
		}
		if err := flush(); err != nil {
			return err
		}
		if isColl(rec.Rule.Kind) {
			pending = &rec
			return nil
		}
		return fn(rec)
	}
	for {
		start := d.offset
		typ, p, err := d.frame()
		if err != nil {
			return Header{}, fmt.Errorf("block %d at offset %d: %w", blocks, start, err)
		}
		switch typ {
		case frameBlock:
			n, err := parseBlock(p, h.Clock.Last, kinds, v >= 4, records, merge)
			if err != nil {
				return Header{}, fmt.Errorf("block %d at offset %d: %w", blocks, start, err)
			}
			records += n
			blocks++
		case frameEnd:
			c := cursor.New(p, ErrCorrupt, "truncated or malformed")
			wantRecords, wantBlocks := c.Uvarint(), c.Uvarint()
			if c.Err != nil || len(c.B) != 0 {
				return Header{}, fmt.Errorf("%w: malformed end frame", ErrCorrupt)
			}
			if wantRecords != records || wantBlocks != blocks {
				return Header{}, fmt.Errorf("%w: end frame says %d records in %d blocks, read %d in %d",
					ErrCorrupt, wantRecords, wantBlocks, records, blocks)
			}
			if err := flush(); err != nil {
				return Header{}, err
			}
			if _, err := d.r.ReadByte(); err == nil {
				return Header{}, fmt.Errorf("%w: data after the end frame at offset %d", ErrCorrupt, d.offset)
			} else if !errors.Is(err, io.EOF) {
				return Header{}, fmt.Errorf("after the end frame: %w", err)
			}
			return h, nil
		default:
			return Header{}, fmt.Errorf("%w: unknown frame type 0x%02x at offset %d", ErrCorrupt, typ, start)
		}
	}
}

// frame reads one frame and verifies its checksum. The payload is valid
// until the next call.
func (d *decoder) frame() (byte, []byte, error) {
	typ, err := d.r.ReadByte()
	if err != nil {
		return 0, nil, d.readErr("frame type (is the end frame missing?)", err)
	}
	d.offset++
	n, err := binary.ReadUvarint(d.r)
	if err != nil {
		return 0, nil, d.readErr("frame length", err)
	}
	var enc [binary.MaxVarintLen64]byte // the length's size: as it was encoded
	d.offset += int64(binary.PutUvarint(enc[:], n))
	if n > MaxFrameLen {
		return 0, nil, fmt.Errorf("%w: frame length %d exceeds %d", ErrCorrupt, n, MaxFrameLen)
	}
	p, err := d.readN(int(n))
	if err != nil {
		return 0, nil, d.readErr("frame payload", err)
	}
	var sum [4]byte
	if _, err := io.ReadFull(d.r, sum[:]); err != nil {
		return 0, nil, d.readErr("frame checksum", err)
	}
	d.offset += 4
	crc := crc32.Update(0, castagnoli, []byte{typ})
	crc = crc32.Update(crc, castagnoli, p)
	if got := binary.LittleEndian.Uint32(sum[:]); got != crc {
		return 0, nil, fmt.Errorf("%w: checksum mismatch (stored %08x, computed %08x)", ErrCorrupt, got, crc)
	}
	return typ, p, nil
}

// readN reads exactly n bytes into the decoder's buffer. The buffer grows
// no faster than data actually arrives (at most doubling, in steps of at
// least 1 MiB), so a corrupt length cannot make it allocate much more than
// the input holds.
func (d *decoder) readN(n int) ([]byte, error) {
	if n <= cap(d.buf) {
		d.buf = d.buf[:n]
		m, err := io.ReadFull(d.r, d.buf)
		d.offset += int64(m)
		return d.buf, err
	}
	b := d.buf[:0]
	for len(b) < n {
		step := min(n-len(b), max(len(b), 1<<20))
		if cap(b)-len(b) < step {
			nb := make([]byte, len(b), len(b)+step)
			copy(nb, b)
			b = nb
		}
		m, err := io.ReadFull(d.r, b[len(b):len(b)+step])
		b = b[:len(b)+m]
		d.offset += int64(m)
		if err != nil {
			d.buf = b[:0]
			return nil, err
		}
	}
	d.buf = b
	return b, nil
}

// readErr classifies an error from the underlying reader.
func (d *decoder) readErr(what string, err error) error {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: stream ends at offset %d, in the %s", ErrTruncated, d.offset, what)
	case err.Error() == "binary: varint overflows a 64-bit integer":
		return fmt.Errorf("%w: %s at offset %d overflows 64 bits", ErrCorrupt, what, d.offset)
	}
	return fmt.Errorf("reading the %s at offset %d: %w", what, d.offset, err)
}

func parseHeader(p []byte) (Header, error) {
	c := cursor.New(p, ErrCorrupt, "truncated or malformed")
	var h Header
	h.Clock.Offset = c.Varint()
	switch c.Byte() {
	case 0:
	case 1:
		h.Clock.Frozen = true
	default:
		if c.Err == nil {
			return Header{}, fmt.Errorf("%w: clock frozen flag is not 0 or 1", ErrCorrupt)
		}
	}
	h.Clock.FrozenAt = c.Varint()
	h.Clock.Last = c.Varint()
	n := c.Uvarint()
	if c.Err == nil && n > MaxMeta {
		return Header{}, fmt.Errorf("%w: %d meta pairs, at most %d", ErrCorrupt, n, MaxMeta)
	}
	for i := uint64(0); i < n && c.Err == nil; i++ {
		k := c.Bytes(MaxMetaLen)
		v := c.Bytes(MaxMetaLen)
		if c.Err == nil {
			h.Meta = append(h.Meta, [2]string{string(k), string(v)})
		}
	}
	if c.Err != nil {
		return Header{}, c.Err
	}
	if len(c.B) != 0 {
		return Header{}, fmt.Errorf("%w: %d stray bytes after the header", ErrCorrupt, len(c.B))
	}
	return h, nil
}

// parseBlock decodes one block's records, calling fn for each, and returns
// how many there were. first is the number of records before this block.
func parseBlock(p []byte, base int64, kinds byte, hasDB bool, first uint64, fn func(engine.Record) error) (uint64, error) {
	c := cursor.New(p, ErrCorrupt, "truncated or malformed")
	var db uint64
	if hasDB {
		db = c.Uvarint()
	}
	n := c.Uvarint()
	if c.Err != nil {
		return 0, c.Err
	}
	if db >= engine.NumDBs {
		return 0, fmt.Errorf("%w: block of database %d", ErrCorrupt, db)
	}
	// Every record takes at least 8 bytes (flags, five varints, key length
	// and a one-byte key): a count beyond that is corrupt, and checking it
	// bounds the slice below.
	if n > uint64(len(c.B))/8 {
		return 0, fmt.Errorf("%w: block claims %d records in %d bytes", ErrCorrupt, n, len(c.B))
	}
	recs := make([]engine.Record, 0, n)
	for i := uint64(0); i < n; i++ {
		rec, err := parseRecord(&c, base, kinds)
		if err != nil {
			return 0, fmt.Errorf("record %d: %w", first+i, err)
		}
		rec.DB = uint8(db)
		recs = append(recs, rec)
	}
	if len(c.B) != 0 {
		return 0, fmt.Errorf("%w: %d stray bytes after the block's records", ErrCorrupt, len(c.B))
	}
	for i, rec := range recs {
		if err := fn(rec); err != nil {
			return 0, fmt.Errorf("record %d: %w", first+uint64(i), err)
		}
	}
	return n, nil
}

// parseRecord decodes one record whose kind is at most kinds (the highest
// kind of the stream's version).
func parseRecord(c *cursor.Cursor, base int64, kinds byte) (engine.Record, error) {
	var rec engine.Record
	flags := c.Byte()
	kind := flags & flagKindMask
	if c.Err == nil && (kind == 0 || kind > kinds) {
		return rec, fmt.Errorf("%w: unknown limiter kind %d", ErrCorrupt, kind)
	}
	rec.Rule.Kind = engine.Kind(kind)
	rec.Rule.Limit = c.Varint()
	rec.Rule.Period = c.Varint()
	rec.A = absolute(c.Varint(), base, flags&flagADelta != 0)
	rec.B = absolute(c.Varint(), base, flags&flagBDelta != 0)
	rec.C = absolute(c.Varint(), base, flags&flagCDelta != 0)
	key := c.Bytes(MaxKeyLen)
	if c.Err == nil && len(key) == 0 {
		return rec, fmt.Errorf("%w: empty key", ErrCorrupt)
	}
	if c.Err != nil {
		return rec, c.Err
	}
	rec.Key = append([]byte(nil), key...)
	if rec.Rule.Kind == engine.KindString {
		if flags&flagLog != 0 {
			return rec, fmt.Errorf("%w: a string key with a log", ErrCorrupt)
		}
		rec.Value = append([]byte{}, c.Bytes(MaxValueLen)...)
		return rec, c.Err
	}
	if isColl(rec.Rule.Kind) {
		// Bit 7 marks a chunk continuing the previous record's
		// collection (Encoder.Write splits a large one).
		rec.Log = nil
		if flags&flagLog != 0 {
			rec.Log = contMark
		}
		n := c.Uvarint()
		if c.Err != nil {
			return rec, c.Err
		}
		// Each element takes at least its length byte (and a score 8).
		if n == 0 || n > MaxElems || n > uint64(len(c.B)) {
			return rec, fmt.Errorf("%w: %d elements with %d bytes left", ErrCorrupt, n, len(c.B))
		}
		rec.Elems = make([][]byte, 0, n)
		if rec.Rule.Kind == engine.KindZSet {
			rec.Scores = make([]float64, 0, n)
		}
		for i := uint64(0); i < n && c.Err == nil; i++ {
			rec.Elems = append(rec.Elems, append([]byte{}, c.Bytes(MaxValueLen)...))
			if rec.Rule.Kind == engine.KindZSet {
				if len(c.B) < 8 {
					return rec, fmt.Errorf("%w: element %d's score truncated", ErrCorrupt, i)
				}
				rec.Scores = append(rec.Scores, math.Float64frombits(binary.LittleEndian.Uint64(c.B[:8])))
				c.B = c.B[8:]
			}
		}
		return rec, c.Err
	}
	if flags&flagLog != 0 && rec.Rule.Kind == engine.KindConcurrency {
		n := c.Uvarint()
		if c.Err != nil {
			return rec, c.Err
		}
		// Each lease takes at least three bytes.
		if n == 0 || n > MaxLogLen || n > uint64(len(c.B))/3 {
			return rec, fmt.Errorf("%w: %d leases with %d bytes left", ErrCorrupt, n, len(c.B))
		}
		rec.Leases = make([]engine.Lease, n)
		prev := base
		for i := range rec.Leases {
			tok := c.Bytes(engine.MaxToken)
			if c.Err == nil && len(tok) == 0 {
				return rec, fmt.Errorf("%w: lease %d has an empty token", ErrCorrupt, i)
			}
			l := &rec.Leases[i]
			l.Token = append([]byte(nil), tok...)
			l.Units = c.Varint()
			prev += c.Varint()
			l.Expiry = prev
		}
		return rec, c.Err
	}
	if flags&flagLog != 0 {
		n := c.Uvarint()
		if c.Err != nil {
			return rec, c.Err
		}
		// Each timestamp takes at least one byte.
		if n == 0 || n > MaxLogLen || n > uint64(len(c.B)) {
			return rec, fmt.Errorf("%w: log of %d timestamps with %d bytes left", ErrCorrupt, n, len(c.B))
		}
		rec.Log = make([]int64, n)
		prev := base
		for i := range rec.Log {
			prev += c.Varint()
			rec.Log[i] = prev
		}
	}
	return rec, c.Err
}

func absolute(v, base int64, relative bool) int64 {
	if relative {
		return v + base
	}
	return v
}

// contMark is the Log a parsed collection chunk carries when it continues
// the previous record (an empty, non-nil slice: collections have no log).
var contMark = []int64{}
