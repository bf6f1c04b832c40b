// Package persistence is sluice's on-disk snapshot format and the layout of
// a node's data directory.
//
// A snapshot is a stream: an 8-byte magic, a version, then checksummed
// frames. The first frame is the header (the engine's clock state and a few
// application key-value pairs); record blocks follow, each holding up to
// about 64 KiB of compactly encoded records; an end frame carries the number
// of records and blocks written and must be the last bytes of the stream:
//
//	stream  = magic "SLUICESN" | uvarint version (2) | header | block* | end
//	frame   = type byte | uvarint length | payload | crc32c(type, payload) LE32
//	header  = type 'H'; payload: varint offset | frozen byte | varint frozenAt |
//	          varint last | uvarint nmeta | (string key | string value)*
//	block   = type 'B'; payload: [uvarint db, version 4 on] | uvarint nrec | record*
//	end     = type 'E'; payload: uvarint records | uvarint blocks
//	string  = uvarint length | bytes
//	record  = flags byte (bits 0-3 kind, bits 4-6 "A/B/C stored relative to
//	          the base", bit 7 "has a log") | varint limit | varint period |
//	          varint A | varint B | varint C | string key |
//	          [uvarint n | varint (t0 - base) | varint (ti - ti-1)*]
//	          or, for a concurrency key (kind 7), bit 7 meaning "has leases":
//	          [uvarint n | (string token | varint units |
//	          varint (expiry - previous expiry, the first from base))*]
//	          or, for a string key (kind 8): string value (A is its expiry,
//	          a Unix time in ms, 0 for none; B and C are 0)
//	          or, for a collection (kind 9 hash, 10 sorted set, 11 list; A
//	          is its expiry as a string's): uvarint n | element*, where an
//	          element is a hash's string field | string value (in insertion
//	          order), a sorted set's string member | 8-byte little-endian
//	          IEEE 754 score (in score order), a list's string (head first);
//	          a collection of more than 16 MiB is written as several such
//	          records of its key, each after the first with bit 7 set
//	          ("continues the previous record", A 0), read back as one
//
// Version 4 added the collection kinds and the database of a block's
// records (SELECT: the blocks of a database other than 0 name it; a block
// holds one database's records), version 3 the string kind, version 2 the
// concurrency kind; version 1 to 3 streams (without those, the same
// encoding otherwise) are still read, their records in database 0.
//
// varint is Go's zigzag encoding (encoding/binary.AppendVarint). The base is
// the header's clock.Last: state words that are timestamps are stored as
// small differences from it, counts as themselves, whichever is shorter.
//
// Decoding never trusts a length: every length is checked against a cap and
// against the bytes actually present, so a corrupt or hostile snapshot yields
// a wrapped error (errors.Is ErrCorrupt, ErrTruncated, ErrVersion or
// ErrNotSnapshot), never a panic or an outsized allocation.
package persistence

import (
	"errors"
	"hash/crc32"

	"github.com/sluice-rl/sluice/engine"
)

// Magic opens every snapshot stream.
const Magic = "SLUICESN"

// Version is the format version Encode writes; Decode reads it and every
// version from minVersion on.
const Version = 4

// minVersion is the oldest format version Decode reads.
const minVersion = 1

// Limits that bound what a snapshot may contain, and so what decoding may
// allocate.
const (
	// MaxKeyLen is the longest key a snapshot may hold.
	MaxKeyLen = 64 << 10
	// MaxLogLen is the most timestamps one record's log may hold.
	MaxLogLen = 10_000_000
	// MaxFrameLen bounds one frame's payload. A record larger than the
	// block target gets a block of its own, so this must hold the largest
	// record: a full log of MaxLogLen timestamps at 10 bytes each.
	MaxFrameLen = 128 << 20
	// MaxMeta bounds the header's key-value pairs, MaxMetaLen each string.
	MaxMeta    = 4096
	MaxMetaLen = 64 << 10
	// blockTarget is the payload size at which the encoder closes a block.
	blockTarget = 64 << 10
)

// Frame types.
const (
	frameHeader = 'H'
	frameBlock  = 'B'
	frameEnd    = 'E'
)

// Record flag bits.
const (
	flagKindMask = 0x0f
	flagADelta   = 1 << 4
	flagBDelta   = 1 << 5
	flagCDelta   = 1 << 6
	flagLog      = 1 << 7
)

// maxKind is the highest engine.Kind a record may carry, the engine's
// last (its table of kinds, engine/kinds.go); maxKindV1 and maxKindV2 the
// highest in a version 1 and 2 stream. A build of a format version refuses
// a kind above that version's bound ("unknown limiter kind"), so a new kind
// comes with a new format version (cluster/version.go's snapshotFormats
// then keeps a mixed cluster on the old one): the old version gets its
// maxKindVn, and TestKindBounds fails until it does.
const (
	maxKind   = engine.NumKinds - 1
	maxKindV1 = 6
	maxKindV2 = 7
	maxKindV3 = 8
)

// A record's kind is 4 bits of its flags.
const _ = uint(flagKindMask - maxKind)

// MaxValueLen is the longest string value a snapshot may hold.
const MaxValueLen = 16 << 20

// MaxElems is the most elements a collection record may hold (a hash's
// fields and values count apart).
const MaxElems = 2 * 16_000_000

// Errors Decode wraps; test them with errors.Is.
var (
	// ErrNotSnapshot: the stream does not start with Magic.
	ErrNotSnapshot = errors.New("not a sluice snapshot")
	// ErrVersion: the stream is of a format version this build cannot read.
	ErrVersion = errors.New("unsupported snapshot version")
	// ErrTruncated: the stream ends before its end frame.
	ErrTruncated = errors.New("truncated snapshot")
	// ErrCorrupt: a checksum, length or field is wrong.
	ErrCorrupt = errors.New("corrupt snapshot")
)

// castagnoli is the CRC-32C table (hardware accelerated on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is what a snapshot carries besides its records.
type Header struct {
	// Clock is the engine's decision clock; Clock.Last is the last applied
	// time, so a restored replica never rewinds.
	Clock engine.ClockState
	// Meta holds the application's key-value pairs, in order (the cluster
	// keeps its applied index and the leaders' addresses here).
	Meta [][2]string
	// Format is the format version of the stream: the one Decode read, or
	// the one Encode is to write, 0 meaning Version. A cluster whose
	// members include an older release writes the format that release
	// reads (cluster/version.go), and Encode refuses a record the format
	// cannot hold.
	Format int
}

// maxKindIn is the highest engine.Kind a stream of format version v holds.
func maxKindIn(v uint64) byte {
	switch v {
	case 1:
		return maxKindV1 // version 1 knew no concurrency keys
	case 2:
		return maxKindV2 // version 2 knew no string keys
	case 3:
		return maxKindV3 // version 3 knew no collections
	}
	return byte(maxKind)
}

// isColl reports whether k is a collection kind (format 4).
func isColl(k engine.Kind) bool {
	return k == engine.KindHash || k == engine.KindZSet || k == engine.KindList
}
