package codec

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/sluice-rl/sluice/engine"
)

// The ops (codec.go has the entries that carry them, results.go their
// results): an op's code, its field mask and its fields in mask order,
// the cost and cursor slots each carrying the one engine.Op field the
// op's row names, and the extension fields of later cluster versions.

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
	case engine.FieldNumKeys:
		return &op.NumKeys
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

// Ops reads a count and that many ops (AppendOps); their Key and Pattern
// alias the input.
func (d *Decoder) Ops() []engine.Op { return d.opsInto(nil) }

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
