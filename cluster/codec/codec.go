// Package codec encodes and decodes what sluice's nodes write to the Raft
// log and send each other: log entries (ops, leader announcements, cluster
// versions, batches of forwarded requests), the ops and results of a
// forwarded batch, and coded errors. The encoding is part of the disk and
// wire formats: an entry written by any release must decode the same way
// forever (testdata/entry_v1.hex, typedfields_test.go). Its one user is
// cluster (fsm.go, batcher.go, the forwarding files); docs/design.md
// describes the package's place.
package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/cursor"
	"github.com/sluice-rl/sluice/internal/errcode"
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

// Field mask bits of an encoded op.
const (
	fieldRule   = 1 << iota
	fieldCost   // the cost slot: Op.Cost, Delta, Count or Clock, as the op's row names (costField)
	fieldCursor // the cursor slot: Op.Cursor or Shadow, as the op's row names (cursorField)
	fieldKey
	fieldPattern
	fieldToken // RL.ACQUIRE, RL.RELEASE
	fieldAll   // RL.ALL's limits
	// fieldExt: an extension mask (uvarint) and the extension fields
	// follow, in bit order. Older entries never set it, so they decode as
	// they always did.
	fieldExt
)

// Extension field bits (after fieldExt). Bits 0..15 belong to the string
// ops (engine/strings.go); bits 16..31 to the fields of cluster version 3
// (scripts, collections, databases).
const (
	extValue  = 1 << iota // string value (Op.Value)
	extExpire             // varint (Op.Expire)
	extFlags              // uvarint (Op.Flags)

	extArgs = 1 << 16 // uvarint n | string* (Op.Args)
	extDB   = 1 << 17 // uvarint (Op.DB), omitted for database 0

	extKnown = extValue | extExpire | extFlags | extArgs | extDB
)

// maxDecodeString bounds any string in an entry or frame; the length is also
// checked against the bytes present, so this only names a sane ceiling.
const maxDecodeString = 64 << 20

// ErrMalformed is wrapped by every decoding error (and by cluster's errors
// for malformed frames).
var ErrMalformed = errors.New("malformed entry")

// OpsSize estimates the encoded size of ops, for batch byte limits.
func OpsSize(ops []engine.Op) int {
	n := binary.MaxVarintLen64
	for i := range ops {
		op := &ops[i]
		n += 2 + 3*binary.MaxVarintLen64 + 1 + 3*binary.MaxVarintLen32 + len(op.Key) + len(op.Pattern) + len(op.Token)
		if op.Value != nil || op.Expire != 0 || op.Flags != 0 || op.Args != nil || op.DB != 0 {
			n += 2*binary.MaxVarintLen32 + binary.MaxVarintLen64 + binary.MaxVarintLen32 + len(op.Value) + 2*binary.MaxVarintLen32
			for _, a := range op.Args {
				n += binary.MaxVarintLen32 + len(a)
			}
		}
		if op.All != nil {
			n += binary.MaxVarintLen32
			for j := range op.All {
				n += 1 + 3*binary.MaxVarintLen64 + binary.MaxVarintLen32 + len(op.All[j].Key)
			}
		}
	}
	return n
}

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

// AppendOps appends a count and the ops (the format's "ops").
func AppendOps(b []byte, ops []engine.Op) []byte {
	b = binary.AppendUvarint(b, uint64(len(ops)))
	for i := range ops {
		b = AppendOp(b, &ops[i])
	}
	return b
}

// costField returns the field of op that travels in the wire's cost slot:
// the one of Cost, Delta, Count and Clock that op's row in the engine's
// table of operations names (engine.CostSlot), Cost when it names none.
// The wire kept one field while engine.Op gave each meaning its own, so
// older entries and members decode and encode them alike
// (typedfields_test.go).
func costField(op *engine.Op) *int64 {
	switch op.Code.Fields() & engine.CostSlot {
	case engine.FieldDelta:
		return &op.Delta
	case engine.FieldCount:
		return &op.Count
	case engine.FieldClock:
		return &op.Clock
	}
	return &op.Cost
}

// cursorField returns the field of op that travels in the wire's cursor
// slot: Shadow when op's row names it (engine.CursorSlot), else Cursor.
func cursorField(op *engine.Op) *uint64 {
	if op.Code.Fields()&engine.FieldShadow != 0 {
		return &op.Shadow
	}
	return &op.Cursor
}

// countField returns the number of result r, the answer of an op of code,
// that travels in the wire's count field: the one the op's row names
// (engine.Answer).
func countField(code engine.OpCode, r *engine.Result) *int64 {
	switch code.Answer() {
	case engine.AnswerTTL:
		return &r.TTL
	case engine.AnswerTime:
		return &r.Time
	}
	return &r.Count
}

// AppendOp appends one op (the format's "op").
func AppendOp(b []byte, op *engine.Op) []byte {
	var mask byte
	if op.Rule != (engine.Rule{}) {
		mask |= fieldRule
	}
	cost := *costField(op)
	if cost != 0 {
		mask |= fieldCost
	}
	cursor := *cursorField(op)
	if cursor != 0 {
		mask |= fieldCursor
	}
	if len(op.Key) > 0 {
		mask |= fieldKey
	}
	if len(op.Pattern) > 0 {
		mask |= fieldPattern
	}
	if len(op.Token) > 0 {
		mask |= fieldToken
	}
	if len(op.All) > 0 {
		mask |= fieldAll
	}
	var ext uint64
	if len(op.Value) > 0 {
		ext |= extValue
	}
	if op.Expire != 0 {
		ext |= extExpire
	}
	if op.Flags != 0 {
		ext |= extFlags
	}
	if len(op.Args) > 0 {
		ext |= extArgs
	}
	if op.DB != 0 {
		ext |= extDB
	}
	if ext != 0 {
		mask |= fieldExt
	}
	b = append(b, byte(op.Code), mask)
	if mask&fieldRule != 0 {
		b = append(b, byte(op.Rule.Kind))
		b = binary.AppendVarint(b, op.Rule.Limit)
		b = binary.AppendVarint(b, op.Rule.Period)
	}
	if mask&fieldCost != 0 {
		b = binary.AppendVarint(b, cost)
	}
	if mask&fieldCursor != 0 {
		b = binary.AppendUvarint(b, cursor)
	}
	if mask&fieldKey != 0 {
		b = AppendStr(b, op.Key)
	}
	if mask&fieldPattern != 0 {
		b = AppendStr(b, op.Pattern)
	}
	if mask&fieldToken != 0 {
		b = AppendStr(b, op.Token)
	}
	if mask&fieldAll != 0 {
		b = binary.AppendUvarint(b, uint64(len(op.All)))
		for i := range op.All {
			l := &op.All[i]
			b = append(b, byte(l.Rule.Kind))
			b = binary.AppendVarint(b, l.Rule.Limit)
			b = binary.AppendVarint(b, l.Rule.Period)
			b = binary.AppendVarint(b, l.Cost)
			b = AppendStr(b, l.Key)
		}
	}
	if mask&fieldExt != 0 {
		b = binary.AppendUvarint(b, ext)
		if ext&extValue != 0 {
			b = AppendStr(b, op.Value)
		}
		if ext&extExpire != 0 {
			b = binary.AppendVarint(b, op.Expire)
		}
		if ext&extFlags != 0 {
			b = binary.AppendUvarint(b, uint64(op.Flags))
		}
		if ext&extArgs != 0 {
			b = binary.AppendUvarint(b, uint64(len(op.Args)))
			for _, a := range op.Args {
				b = AppendStr(b, a)
			}
		}
		if ext&extDB != 0 {
			b = binary.AppendUvarint(b, uint64(op.DB))
		}
	}
	return b
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

// Results, for the forwarding protocol: the leader computes them and the
// follower relays them.
//
//	results: uvarint n | result*
//	result:  uvarint field mask | fields in mask order (see result*)
//	         (the error field: see AppendError)
const (
	resultErr = 1 << iota
	resultKind
	resultAllowed
	resultLimit
	resultRemaining
	resultRetry
	resultReset
	resultCount
	resultCursor
	resultKeys
	resultEach  // RL.ALL's per-limit results: uvarint n | result*
	resultValue // a string key's value: string
	// resultValues: a collection op's list: uvarint n | (uvarint 0 for nil,
	// else uvarint len+1 | bytes)*
	resultValues
)

// AppendError encodes err as its code, detail and number: never a reply
// text (the RESP server renders those). An error without a code goes as
// Other with its text as the detail.
//
//	error: code byte | string detail | varint num
func AppendError(b []byte, err error) []byte {
	e := errcode.Of(err)
	if e == nil {
		e = &errcode.Error{Code: errcode.Other, Detail: err.Error()}
	}
	b = append(b, byte(e.Code))
	b = binary.AppendUvarint(b, uint64(len(e.Detail)))
	b = append(b, e.Detail...)
	return binary.AppendVarint(b, e.Num)
}

// Sentinels are the errors without details that a decoded code turns
// back into, so that an error that came over the wire is the very value
// (==) a local one is; cluster keeps its table in errors.go.
type Sentinels []error

// Rebuild rebuilds a coded error that came over the wire: the sentinel of
// code when it has no details, else a new value.
func (s Sentinels) Rebuild(code errcode.Code, detail string, num int64) error {
	if detail == "" && num == 0 {
		for _, e := range s {
			if errcode.Of(e).Code == code {
				return e
			}
		}
	}
	return &errcode.Error{Code: code, Detail: detail, Num: num}
}

// CodedError reads an error AppendError wrote: the sentinel value in s
// when it has no details (so errors.Is and == work as on the leader), else
// a new one. A code this node does not know is malformed: all nodes run
// the same version.
func (d *Decoder) CodedError(s Sentinels) error {
	code := errcode.Code(d.Byte())
	detail := d.Str()
	num := d.Varint()
	if d.Err == nil && code >= errcode.NumCodes {
		d.Err = fmt.Errorf("%w: unknown error code %d", ErrMalformed, code)
	}
	if d.Err != nil {
		return nil
	}
	return s.Rebuild(code, string(detail), num)
}

// AppendResults appends a count and the results (the format's "results"):
// rs[i] answers ops[i], whose code says which of its numbers travels in
// the count field (countField; Count for a result without its op).
func AppendResults(b []byte, ops []engine.Op, rs []engine.Result) []byte {
	b = binary.AppendUvarint(b, uint64(len(rs)))
	for i := range rs {
		b = appendResult(b, codeOf(ops, i), &rs[i])
	}
	return b
}

// codeOf is the code of ops[i], 0 (an op answering in Count) past the end.
func codeOf(ops []engine.Op, i int) engine.OpCode {
	if i < len(ops) {
		return ops[i].Code
	}
	return 0
}

// appendResult appends r, an op of code's result. The per-limit results
// (Each) are decisions: they answer in Count.
func appendResult(b []byte, code engine.OpCode, r *engine.Result) []byte {
	count := *countField(code, r)
	var mask uint64
	if r.Err != nil {
		mask |= resultErr
	}
	if r.Kind != 0 {
		mask |= resultKind
	}
	if r.Allowed {
		mask |= resultAllowed
	}
	if r.Limit != 0 {
		mask |= resultLimit
	}
	if r.Remaining != 0 {
		mask |= resultRemaining
	}
	if r.RetryAfter != 0 {
		mask |= resultRetry
	}
	if r.ResetAfter != 0 {
		mask |= resultReset
	}
	if count != 0 {
		mask |= resultCount
	}
	if r.Cursor != 0 {
		mask |= resultCursor
	}
	if r.Keys != nil {
		mask |= resultKeys
	}
	if r.Each != nil {
		mask |= resultEach
	}
	if r.Value != nil {
		mask |= resultValue
	}
	if r.Values != nil {
		mask |= resultValues
	}
	b = binary.AppendUvarint(b, mask)
	if r.Err != nil {
		b = AppendError(b, r.Err)
	}
	if r.Kind != 0 {
		b = append(b, byte(r.Kind))
	}
	for _, v := range []struct {
		bit uint64
		v   int64
	}{{resultLimit, r.Limit}, {resultRemaining, r.Remaining}, {resultRetry, r.RetryAfter}, {resultReset, r.ResetAfter}, {resultCount, count}} {
		if mask&v.bit != 0 {
			b = binary.AppendVarint(b, v.v)
		}
	}
	if r.Cursor != 0 {
		b = binary.AppendUvarint(b, r.Cursor)
	}
	if r.Keys != nil {
		b = binary.AppendUvarint(b, uint64(len(r.Keys)))
		for _, k := range r.Keys {
			b = AppendStr(b, k)
		}
	}
	if r.Each != nil {
		b = binary.AppendUvarint(b, uint64(len(r.Each)))
		for i := range r.Each {
			b = appendResult(b, 0, &r.Each[i])
		}
	}
	if r.Value != nil {
		b = AppendStr(b, r.Value)
	}
	if r.Values != nil {
		b = binary.AppendUvarint(b, uint64(len(r.Values)))
		for _, v := range r.Values {
			if v == nil {
				b = append(b, 0)
				continue
			}
			b = binary.AppendUvarint(b, uint64(len(v))+1)
			b = append(b, v...)
		}
	}
	return b
}

// DecodeResults decodes results into rs, which must have the length the
// encoding says, rs[i] answering ops[i] (as AppendResults); their errors
// become s's sentinels where they can. Keys are copied out of data.
func DecodeResults(data []byte, ops []engine.Op, rs []engine.Result, s Sentinels) error {
	d := NewDecoder(data)
	n := d.Uvarint()
	if d.Err == nil && n != uint64(len(rs)) {
		return fmt.Errorf("%w: %d results for %d ops", ErrMalformed, n, len(rs))
	}
	for i := 0; i < len(rs) && d.Err == nil; i++ {
		rs[i] = d.result(codeOf(ops, i), true, s)
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%w: %d stray bytes after the results", ErrMalformed, len(d.B))
	}
	return d.Err
}

// result reads one result, an op of code's; nested says whether it may
// hold per-limit results (one level only); its error becomes one of s
// where it can.
func (d *Decoder) result(code engine.OpCode, nested bool, s Sentinels) engine.Result {
	r := engine.Result{}
	mask := d.Uvarint()
	if mask&resultErr != 0 {
		r.Err = d.CodedError(s)
	}
	if mask&resultKind != 0 {
		r.Kind = engine.Kind(d.Byte())
	}
	r.Allowed = mask&resultAllowed != 0
	for _, f := range []struct {
		bit uint64
		p   *int64
	}{{resultLimit, &r.Limit}, {resultRemaining, &r.Remaining}, {resultRetry, &r.RetryAfter}, {resultReset, &r.ResetAfter}, {resultCount, countField(code, &r)}} {
		if mask&f.bit != 0 {
			*f.p = d.Varint()
		}
	}
	if mask&resultCursor != 0 {
		r.Cursor = d.Uvarint()
	}
	if mask&resultKeys != 0 {
		k := d.Uvarint()
		if d.Err == nil && k > uint64(len(d.B)) { // each key takes at least its length byte
			d.Err = fmt.Errorf("%w: %d keys in %d bytes", ErrMalformed, k, len(d.B))
		}
		if d.Err == nil {
			r.Keys = make([][]byte, 0, k)
			for j := uint64(0); j < k && d.Err == nil; j++ {
				r.Keys = append(r.Keys, bytes.Clone(d.Str()))
			}
		}
	}
	if mask&resultEach != 0 {
		k := d.Uvarint()
		if d.Err == nil && (!nested || k > engine.MaxAll || k > uint64(len(d.B))) {
			d.Err = fmt.Errorf("%w: %d per-limit results in %d bytes", ErrMalformed, k, len(d.B))
		}
		if d.Err == nil {
			r.Each = make([]engine.Result, k)
			for j := range r.Each {
				r.Each[j] = d.result(0, false, s)
			}
		}
	}
	if mask&resultValue != 0 {
		r.Value = append([]byte{}, d.Str()...)
	}
	if mask&resultValues != 0 {
		r.Values = d.values()
	}
	return r
}

// values reads a result's list (resultValues), copied out of the input,
// its nil elements kept nil.
func (d *Decoder) values() [][]byte {
	n := d.Uvarint()
	if d.Err == nil && n > uint64(len(d.B)) { // each takes at least one byte
		d.Err = fmt.Errorf("%w: %d values in %d bytes", ErrMalformed, n, len(d.B))
	}
	if d.Err != nil {
		return nil
	}
	vs := make([][]byte, 0, n)
	for j := uint64(0); j < n && d.Err == nil; j++ {
		l := d.Uvarint()
		if l == 0 {
			vs = append(vs, nil)
			continue
		}
		if d.Err == nil && l-1 > uint64(len(d.B)) {
			d.Err = fmt.Errorf("%w: a value of %d bytes in %d", ErrMalformed, l-1, len(d.B))
		}
		if d.Err == nil {
			vs = append(vs, append([]byte{}, d.B[:l-1]...))
			d.B = d.B[l-1:]
		}
	}
	return vs
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

// Ops reads a count and that many ops (AppendOps); their Key and Pattern
// alias the input.
func (d *Decoder) Ops() []engine.Op { return d.opsInto(nil) }

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

// opsInto reads a count and that many ops, into buf's array when it is
// large enough.
func (d *Decoder) opsInto(buf []engine.Op) []engine.Op {
	n := d.Uvarint()
	if d.Err != nil {
		return nil
	}
	if n > uint64(len(d.B))/2 { // every op takes at least two bytes
		d.Err = fmt.Errorf("%w: %d ops in %d bytes", ErrMalformed, n, len(d.B))
		return nil
	}
	var ops []engine.Op
	if uint64(cap(buf)) >= n {
		ops = buf[:n]
		clear(ops)
	} else {
		ops = make([]engine.Op, n)
	}
	for i := range ops {
		op := &ops[i]
		op.Code = engine.OpCode(d.Byte())
		mask := d.Byte()
		if mask&^(fieldRule|fieldCost|fieldCursor|fieldKey|fieldPattern|fieldToken|fieldAll|fieldExt) != 0 && d.Err == nil {
			d.Err = fmt.Errorf("%w: op %d: unknown field mask 0x%02x", ErrMalformed, i, mask)
		}
		if mask&fieldRule != 0 {
			op.Rule.Kind = engine.Kind(d.Byte())
			op.Rule.Limit = d.Varint()
			op.Rule.Period = d.Varint()
		}
		if mask&fieldCost != 0 {
			*costField(op) = d.Varint()
		}
		if mask&fieldCursor != 0 {
			*cursorField(op) = d.Uvarint()
		}
		if mask&fieldKey != 0 {
			op.Key = d.Str()
		}
		if mask&fieldPattern != 0 {
			op.Pattern = d.Str()
		}
		if mask&fieldToken != 0 {
			op.Token = d.Str()
		}
		if mask&fieldAll != 0 {
			op.All = d.limits()
		}
		if mask&fieldExt != 0 {
			d.ext(op, i)
		}
		if d.Err != nil {
			return nil
		}
		if len(op.Key) == 0 {
			op.Key = nil // as the encoder would have omitted it
		}
		if len(op.Pattern) == 0 {
			op.Pattern = nil
		}
		if len(op.Token) == 0 {
			op.Token = nil
		}
	}
	return ops
}

// ext reads an op's extension mask and fields (the string ops'). An
// extension bit this node does not know is malformed: all nodes run the
// same version.
func (d *Decoder) ext(op *engine.Op, i int) {
	ext := d.Uvarint()
	if d.Err != nil {
		return
	}
	if ext&^extKnown != 0 || ext == 0 {
		d.Err = fmt.Errorf("%w: op %d: unknown extension mask %#x", ErrMalformed, i, ext)
		return
	}
	if ext&extValue != 0 {
		op.Value = d.Str()
		if d.Err == nil && len(op.Value) == 0 {
			op.Value = nil // as the encoder would have omitted it
		}
	}
	if ext&extExpire != 0 {
		op.Expire = d.Varint()
	}
	if ext&extFlags != 0 {
		f := d.Uvarint()
		if d.Err == nil && f > math.MaxUint32 {
			d.Err = fmt.Errorf("%w: op %d: flags %#x", ErrMalformed, i, f)
		}
		op.Flags = uint32(f)
	}
	if ext&extArgs != 0 {
		n := d.Uvarint()
		if d.Err == nil && (n == 0 || n > uint64(len(d.B))) { // each takes at least its length byte
			d.Err = fmt.Errorf("%w: op %d: %d arguments in %d bytes", ErrMalformed, i, n, len(d.B))
			return
		}
		if d.Err == nil {
			op.Args = make([][]byte, 0, n)
			for j := uint64(0); j < n && d.Err == nil; j++ {
				op.Args = append(op.Args, d.Str())
			}
		}
	}
	if ext&extDB != 0 {
		db := d.Uvarint()
		if d.Err == nil && (db == 0 || db > math.MaxUint8) {
			d.Err = fmt.Errorf("%w: op %d: database %d", ErrMalformed, i, db)
		}
		op.DB = uint8(db)
	}
}

// limits reads RL.ALL's limits: a count from 1 to engine.MaxAll, then each
// limit's rule, cost and key (the keys alias the input).
func (d *Decoder) limits() []engine.Limit {
	n := d.Uvarint()
	if d.Err != nil {
		return nil
	}
	if n < 1 || n > engine.MaxAll || n > uint64(len(d.B))/5 { // a limit takes at least five bytes
		d.Err = fmt.Errorf("%w: %d limits in %d bytes", ErrMalformed, n, len(d.B))
		return nil
	}
	lims := make([]engine.Limit, n)
	for i := range lims {
		l := &lims[i]
		l.Rule.Kind = engine.Kind(d.Byte())
		l.Rule.Limit = d.Varint()
		l.Rule.Period = d.Varint()
		l.Cost = d.Varint()
		l.Key = d.Str()
	}
	if d.Err != nil {
		return nil
	}
	return lims
}
