// Package codec encodes and decodes what sluice's nodes write to the Raft
// log and send each other: log entries (ops, leader announcements, cluster
// versions, batches of forwarded requests), the ops and results of a
// forwarded batch, and coded errors. The encoding is part of the disk and
// wire formats: an entry written by any release must decode the same way
// forever (testdata/entry_v1.hex, typedfields_test.go). Its one user is
// cluster (fsm.go, batcher.go, the forwarding files); docs/design.md
// describes the package's place. This file holds the format and the
// entries; ops.go the ops, results.go the results and coded errors.
package codec

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/cursor"
)

// Log entry encoding. Every Raft command entry starts with a type byte that
// doubles as the format version; a new format gets a new byte, and old
// bytes stay decodable for as long as logs holding them may exist.
//
//	ops entry:    0x01 | varint stamp (leader's wall clock, ns) | ops
//	leader entry: 0x02 | string id | string resp addr | string forward addr
//	version entry: 0x04 | uvarint cluster version (cluster/version.go; from
//	              cluster version 2 on)
//	batch entry:  0x03 | varint stamp | uvarint total ops | uvarint n | request*
//	request:      0x00 ops (a local request) | 0x01 batch id (16 bytes) ops
//	              (a follower's forwarded request, applied at most once:
//	              cluster/fsm.go)
//	ops:          uvarint n | op*
//	op:           code byte | field mask byte | fields in mask order
//	fields:       rule (kind byte, varint limit, varint period) | varint cost |
//	              uvarint cursor | string key | string pattern |
//	              string token | limits | ext
//	              (cost and cursor are slots: each carries the one engine.Op
//	              field of its group the op's row names, costField and
//	              cursorField)
//	ext:          (mask bit 7) uvarint extension mask | extension fields in
//	              bit order: bits 0-15 the string ops' (string value |
//	              varint expire | uvarint flags), bits 16-31 reserved
//	limits:       uvarint n | (kind byte, varint limit, varint period,
//	              varint cost, string key)*   (RL.ALL, 1 <= n <= 64)
//	string:       uvarint length | bytes
//
// Absent fields are zero: a typical RL.TOKEN op costs 2 + 4 + key bytes
// plus a few for its numbers. A leader writes a batch entry only when it
// holds a forwarded request (one with an ID), else an ops entry, so that
// entries without IDs keep the first format; both decode forever.
//
// The type byte's top bit is the ignorable flag (EntryIgnorable): an entry
// whose type a node does not know is skipped by that node only when the
// flag is set (an optional entry: a hint, a statistic, nothing the state
// depends on); without it the node stops applying the group
// (cluster/fsm.go), since skipping an entry the other replicas apply would
// make the replicas diverge. Releases before cluster versions (v0.1.0) skip
// every entry they cannot decode, flagged or not: that is why a new entry
// type is written only once the cluster version says every member knows it
// (cluster/version.go).
//
// The entry types: EntryOps, EntryLeader, EntryBatch and EntryVersion;
// EntryIgnorable is the flag.
const (
	EntryOps     = 0x01
	EntryLeader  = 0x02
	EntryBatch   = 0x03
	EntryVersion = 0x04

	EntryIgnorable = 0x80 // flag: a node that does not know the type may skip the entry
	entryTypeMask  = 0x7f
)

// Request flags in a batch entry.
const (
	reqLocal     = 0x00
	reqForwarded = 0x01
)

// BatchID identifies a follower's forwarded batch across every try to
// send it: a random prefix drawn when the follower's process starts, then
// a counter. The zero ID means none (a local request).
type BatchID [16]byte

// Span is one request of a decoded batch entry: its ID and where its
// ops sit in the entry's ops.
type Span struct {
	ID     BatchID
	Off, N int // the request's ops are the entry's Ops[Off : Off+N]
}

// maxDecodeString bounds any string in an entry or frame; the length is also
// checked against the bytes present, so this only names a sane ceiling.
const maxDecodeString = 64 << 20

// ErrMalformed is wrapped by every decoding error (and by cluster's errors
// for malformed frames).
var ErrMalformed = errors.New("malformed entry")

// AppendOpsEntryHeader starts an ops entry stamped at stamp holding n ops;
// the ops follow with AppendOp.
func AppendOpsEntryHeader(b []byte, stamp int64, n int) []byte {
	b = append(b, EntryOps)
	b = binary.AppendVarint(b, stamp)
	return binary.AppendUvarint(b, uint64(n))
}

// AppendBatchEntryHeader starts a batch entry stamped at stamp holding
// nops ops in nreqs requests; each request follows with AppendBatchRequest
// and its ops with AppendOp.
func AppendBatchEntryHeader(b []byte, stamp int64, nops, nreqs int) []byte {
	b = append(b, EntryBatch)
	b = binary.AppendVarint(b, stamp)
	b = binary.AppendUvarint(b, uint64(nops))
	return binary.AppendUvarint(b, uint64(nreqs))
}

// AppendBatchRequest starts one request of a batch entry: its ID (none
// when zero) and its op count.
func AppendBatchRequest(b []byte, id BatchID, nops int) []byte {
	if id == (BatchID{}) {
		b = append(b, reqLocal)
	} else {
		b = append(b, reqForwarded)
		b = append(b, id[:]...)
	}
	return binary.AppendUvarint(b, uint64(nops))
}

// Leader announces a leader's addresses through the log (a leader entry).
type Leader struct {
	ID      string // the node's ID
	RESP    string // its RESP address
	Forward string // its forward address
}

// AppendVersionEntry encodes the entry that raises the cluster version to v.
func AppendVersionEntry(b []byte, v uint32) []byte {
	b = append(b, EntryVersion)
	return binary.AppendUvarint(b, uint64(v))
}

// AppendLeaderEntry encodes the entry that announces leader e.
func AppendLeaderEntry(b []byte, e Leader) []byte {
	b = append(b, EntryLeader)
	b = AppendStr(b, []byte(e.ID))
	b = AppendStr(b, []byte(e.RESP))
	return AppendStr(b, []byte(e.Forward))
}

// Entry is one decoded command entry: ops with their stamp, a leader
// announcement or a cluster version.
type Entry struct {
	Type      byte // without the ignorable flag
	Ignorable bool // the type byte carried EntryIgnorable
	Stamp     int64
	Ops       []engine.Op
	Spans     []Span // batch entries: the requests, in order
	Leader    Leader // leader entries
	Version   uint32 // version entries
}

// errUnknownEntry is wrapped by DecodeEntryInto's error for an entry of a type
// this build does not know.
var errUnknownEntry = errors.New("unknown entry type")

// DecodeEntryInto decodes a command entry, with the ops decoded into buf's
// array and a batch entry's requests into spans' when they are large
// enough (nil for new ones). The ops' Key and Pattern alias data.
func DecodeEntryInto(data []byte, buf []engine.Op, spans []Span) (Entry, error) {
	if len(data) == 0 {
		return Entry{}, fmt.Errorf("%w: empty", ErrMalformed)
	}
	d := NewDecoder(data[1:])
	e := Entry{Type: data[0] & entryTypeMask, Ignorable: data[0]&EntryIgnorable != 0}
	switch e.Type {
	case EntryOps:
		e.Stamp = d.Varint()
		e.Ops = d.opsInto(buf)
	case EntryBatch:
		e.Stamp = d.Varint()
		e.Ops, e.Spans = d.batch(buf, spans)
	case EntryLeader:
		e.Leader.ID = string(d.Str())
		e.Leader.RESP = string(d.Str())
		e.Leader.Forward = string(d.Str())
	case EntryVersion:
		v := d.Uvarint()
		if d.Err == nil && (v < 1 || v > 1<<31) {
			d.Err = fmt.Errorf("%w: cluster version %d", ErrMalformed, v)
		}
		e.Version = uint32(v)
	default:
		return Entry{Type: e.Type, Ignorable: e.Ignorable}, fmt.Errorf("%w: %w 0x%02x", ErrMalformed, errUnknownEntry, data[0])
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%w: %d stray bytes", ErrMalformed, len(d.B))
	}
	if d.Err != nil {
		return Entry{Type: e.Type, Ignorable: e.Ignorable}, d.Err
	}
	return e, nil
}

// AppendStr appends s as a string (the format's "string": uvarint length |
// bytes), as entries, results and cluster's frames carry them.
func AppendStr(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Decoder reads entries, frames and results: a cursor (internal/cursor)
// whose failures wrap ErrMalformed, with this package's structures on top.
type Decoder struct{ cursor.Cursor }

// NewDecoder returns a Decoder over b.
func NewDecoder(b []byte) Decoder { return Decoder{cursor.New(b, ErrMalformed, "truncated")} }

// Str reads a string (AppendStr) of at most maxDecodeString bytes; it
// aliases the input.
func (d *Decoder) Str() []byte { return d.Bytes(maxDecodeString) }

// batch reads a batch entry's body after its stamp: every request's ops,
// one after the other in one slice (buf's array when large enough), and
// the requests' spans (in spans' array when large enough).
func (d *Decoder) batch(buf []engine.Op, spans []Span) ([]engine.Op, []Span) {
	total := d.Uvarint()
	nreq := d.Uvarint()
	if d.Err != nil {
		return nil, nil
	}
	// Every op takes at least two bytes, every request at least two.
	if total > uint64(len(d.B))/2 || nreq > uint64(len(d.B))/2 {
		d.Err = fmt.Errorf("%w: %d ops in %d requests in %d bytes", ErrMalformed, total, nreq, len(d.B))
		return nil, nil
	}
	var ops []engine.Op
	if uint64(cap(buf)) >= total {
		ops = buf[:total]
	} else {
		ops = make([]engine.Op, total)
	}
	if uint64(cap(spans)) >= nreq {
		spans = spans[:0]
	} else {
		spans = make([]Span, 0, nreq)
	}
	off := 0
	for i := uint64(0); i < nreq && d.Err == nil; i++ {
		var sp Span
		switch flag := d.Byte(); {
		case d.Err != nil:
		case flag == reqForwarded:
			if len(d.B) < len(sp.ID) {
				d.Fail("batch id")
				break
			}
			copy(sp.ID[:], d.B)
			d.B = d.B[len(sp.ID):]
		case flag != reqLocal:
			d.Err = fmt.Errorf("%w: request %d: unknown flag 0x%02x", ErrMalformed, i, flag)
		}
		if d.Err != nil {
			break
		}
		// opsInto decodes into ops[off:] when the count fits there.
		sub := d.opsInto(ops[off:off])
		if d.Err == nil && len(sub) > len(ops)-off {
			d.Err = fmt.Errorf("%w: requests hold more than %d ops", ErrMalformed, total)
		}
		sp.Off, sp.N = off, len(sub)
		off += len(sub)
		spans = append(spans, sp)
	}
	if d.Err == nil && off != len(ops) {
		d.Err = fmt.Errorf("%w: requests hold %d ops, the entry says %d", ErrMalformed, off, total)
	}
	if d.Err != nil {
		clear(ops)
		return nil, nil
	}
	return ops, spans
}
