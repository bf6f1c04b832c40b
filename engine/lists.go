package engine

import (
	"encoding/binary"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// Lists (KindList): LPUSH, LINDEX, LTRIM... (SPEC section 15), no blocking
// commands. A list is a ring of records pointing into its byte arena: a
// push or a pop at either end is O(1), LINDEX and LSET are O(1), LRANGE
// and LTRIM cost what they touch; LREM and LSET with a longer element
// leave dead bytes that a compaction reclaims once they are half the
// arena.

// OpCodes of lists (100..119 are reserved for them).
const (
	// OpLPush pushes Args at the head (ListRight: at the tail), in order;
	// ListX: only onto an existing list (LPUSHX). Result.Count is the
	// new length (0 when ListX found no list).
	OpLPush OpCode = 100
	// OpLPop pops Count elements from the head (ListRight: the tail) into
	// Result.Values; Result.Kind is KindList when the key existed.
	OpLPop OpCode = 101
	// OpLLen sets Result.Count to the length.
	OpLLen OpCode = 102
	// OpLIndex reads the element at index Args[0] (text, negative from
	// the tail; parsed once the list is found, as Redis does): Result.Count
	// 1 and Result.Value when there is one.
	OpLIndex OpCode = 103
	// OpLRange reads the elements from index Args[0] to Args[1] (text,
	// inclusive, negative from the tail) into Result.Values.
	OpLRange OpCode = 104
	// OpLTrim keeps only the elements from Args[0] to Args[1].
	OpLTrim OpCode = 105
	// OpLSet sets the element at index Args[0] (text, as OpLIndex's) to
	// Args[1].
	OpLSet OpCode = 106
	// OpLRem removes elements equal to Args[1]: the first Args[0] (text)
	// from the head (negative: from the tail; 0: all); Result.Count is how
	// many.
	OpLRem OpCode = 107
)

// Flags of the list ops.
const (
	ListRight uint32 = 1 << iota
	ListX
)

// ListOps lists the list OpCodes.
var ListOps = [...]OpCode{OpLPush, OpLPop, OpLLen, OpLIndex, OpLRange, OpLTrim, OpLSet, OpLRem}

// listVal is one list: its elements in arena, each after its length as
// a uvarint (as a listpack packs them), and a ring of their offsets.
type listVal struct {
	arena   []byte
	ring    []uint32 // offsets into arena; len is a power of two (or 0)
	head    int
	n       int
	garbage int
	data    int64
}

func (l *listVal) size() int        { return l.n }
func (l *listVal) dataBytes() int64 { return l.data + int64(l.n)*listElemCost }

func (l *listVal) rec(i int) *uint32 { return &l.ring[(l.head+i)&(len(l.ring)-1)] }

// elem returns the element at arena offset off and its stored size
// (length prefix included).
func (l *listVal) elem(off uint32) ([]byte, int) {
	n, w := binary.Uvarint(l.arena[off:])
	start := int(off) + w
	return l.arena[start : start+int(n)], w + int(n)
}

func (l *listVal) at(i int) []byte {
	v, _ := l.elem(*l.rec(i))
	return v
}

func (l *listVal) grow() {
	size := max(4, 2*len(l.ring))
	ring := make([]uint32, size)
	for i := range l.n {
		ring[i] = *l.rec(i)
	}
	l.ring, l.head = ring, 0
}

// push adds v at the tail, or at the head when left.
func (l *listVal) push(v []byte, left bool) {
	if l.n == len(l.ring) {
		l.grow()
	}
	r := uint32(len(l.arena))
	l.arena = append(binary.AppendUvarint(l.arena, uint64(len(v))), v...)
	if left {
		l.head = (l.head - 1) & (len(l.ring) - 1)
		l.ring[l.head] = r
	} else {
		l.ring[(l.head+l.n)&(len(l.ring)-1)] = r
	}
	l.n++
	l.data += int64(len(v))
}

// pop removes the head (or the tail when right).
func (l *listVal) pop(right bool) {
	i := 0
	if right {
		i = l.n - 1
	}
	v, size := l.elem(*l.rec(i))
	l.garbage += size
	l.data -= int64(len(v))
	if !right {
		l.head = (l.head + 1) & (len(l.ring) - 1)
	}
	l.n--
}

// settle compacts a list once its dead bytes are half its arena, and
// shrinks a mostly empty ring.
func (l *listVal) settle() {
	if l.n == 0 {
		*l = listVal{}
		return
	}
	if l.garbage*2 > len(l.arena) && l.garbage >= 256 || len(l.ring) > 64 && l.n*4 < len(l.ring) {
		l.compact()
	}
}

func (l *listVal) compact() {
	arena := make([]byte, 0, l.data+int64(l.n))
	size := 4
	for size < l.n {
		size *= 2
	}
	ring := make([]uint32, size)
	for i := range l.n {
		v := l.at(i)
		ring[i] = uint32(len(arena))
		arena = append(binary.AppendUvarint(arena, uint64(len(v))), v...)
	}
	l.arena, l.ring, l.head, l.garbage = arena, ring, 0, 0
}

// span resolves LRANGE's start and stop to [lo, hi).
func (l *listVal) span(start, end int64) (int, int) {
	lo, hi := rankSpan(start, end, int64(l.n))
	return int(lo), int(hi)
}

// rankSpan resolves a range of ranks over n elements, start and end
// inclusive and negative from the end, to [lo, hi), as Redis's LRANGE,
// LTRIM and ZRANGE do: empty when it misses, clipped to the elements.
func rankSpan(start, end, n int64) (lo, hi int64) {
	if start < 0 {
		start += n
	}
	if end < 0 {
		end += n
	}
	if start < 0 {
		start = 0
	}
	if start > end || start >= n {
		return 0, 0
	}
	if end >= n {
		end = n - 1
	}
	return start, end + 1
}

// listOp runs one list op.
func (c *collCtx) listOp() Result {
	op := c.op
	var l *listVal
	if c.obj != nil {
		l = c.obj.(*listVal)
	}
	switch op.Code {
	case OpLPush:
		if len(op.Args) == 0 {
			return Result{Err: badRule("LPUSH needs elements")}
		}
		if l == nil && op.Flags&ListX != 0 {
			return Result{}
		}
		if err := c.tooLong(0, 1); err != nil {
			return Result{Err: err}
		}
		b := int64(0)
		for _, a := range op.Args {
			b += int64(len(a))
		}
		if err := c.room(len(op.Args), b); err != nil {
			return Result{Err: err}
		}
		if l == nil {
			l = &listVal{}
			c.create(l)
		}
		for _, a := range op.Args {
			l.push(a, op.Flags&ListRight == 0)
		}
		return Result{Count: int64(l.n)}
	case OpLPop:
		if l == nil {
			return Result{}
		}
		if op.Count < 0 {
			return Result{Err: badRule("negative count")}
		}
		k := int(min(op.Count, int64(l.n)))
		var vb valuesBuilder
		right := op.Flags&ListRight != 0
		for range k {
			if right {
				vb.add(l.at(l.n - 1))
			} else {
				vb.add(l.at(0))
			}
			l.pop(right)
		}
		l.settle()
		return Result{Values: vb.values(), Kind: KindList}
	case OpLLen:
		if l == nil {
			return Result{}
		}
		return Result{Count: int64(l.n)}
	case OpLIndex:
		if l == nil {
			return Result{}
		}
		// The index is parsed once the list is found, as Redis does.
		i, ok := c.argInt(0)
		if !ok {
			return Result{Err: ErrNotInteger}
		}
		if i < 0 {
			i += int64(l.n)
		}
		if i < 0 || i >= int64(l.n) {
			return Result{}
		}
		return Result{Count: 1, Kind: KindList, Value: append([]byte{}, l.at(int(i))...)}
	case OpLRange, OpLTrim:
		start, ok1 := c.argInt(0)
		end, ok2 := c.argInt(1)
		if !ok1 || !ok2 {
			return Result{Err: ErrNotInteger}
		}
		if l == nil {
			if op.Code == OpLRange {
				return Result{Values: [][]byte{}}
			}
			return Result{}
		}
		lo, hi := l.span(start, end)
		if op.Code == OpLRange {
			var vb valuesBuilder
			for i := lo; i < hi; i++ {
				vb.add(l.at(i))
			}
			return Result{Values: vb.values(), Kind: KindList}
		}
		tail := l.n - hi
		for range lo {
			l.pop(false)
		}
		for range tail {
			l.pop(true)
		}
		if lo == hi {
			for l.n > 0 {
				l.pop(false)
			}
		}
		l.settle()
		return Result{}
	case OpLSet:
		if len(op.Args) != 2 {
			return Result{Err: badRule("LSET needs an index and an element")}
		}
		val := op.Args[1]
		if err := c.e.valueTooLong(len(val)); err != nil {
			return Result{Err: err}
		}
		if l == nil {
			return Result{Err: errcode.New(errcode.NoSuchKey)}
		}
		i, ok := c.argInt(0) // parsed once the list is found, as Redis does
		if !ok {
			return Result{Err: ErrNotInteger}
		}
		if i < 0 {
			i += int64(l.n)
		}
		if i < 0 || i >= int64(l.n) {
			return Result{Err: errcode.New(errcode.IndexOutOfRange)}
		}
		r := l.rec(int(i))
		old, size := l.elem(*r)
		if d := int64(len(val)) - int64(len(old)); d > 0 {
			if err := c.room(0, d); err != nil {
				return Result{Err: err}
			}
		}
		l.data += int64(len(val)) - int64(len(old))
		need := uvarintLen(uint64(len(val))) + len(val)
		if need <= size {
			w := binary.PutUvarint(l.arena[*r:], uint64(len(val)))
			copy(l.arena[int(*r)+w:], val)
			l.garbage += size - need
		} else {
			l.garbage += size
			*r = uint32(len(l.arena))
			l.arena = append(binary.AppendUvarint(l.arena, uint64(len(val))), val...)
		}
		l.settle()
		return Result{}
	case OpLRem:
		if l == nil {
			return Result{}
		}
		n, ok := c.argInt(0)
		if !ok || len(op.Args) != 2 {
			return Result{Err: ErrNotInteger}
		}
		return Result{Count: l.rem(op.Args[1], n)}
	}
	return Result{Err: badRule("unknown operation code %d", op.Code)}
}

// rem is LREM: it keeps the elements not removed in order, in a new ring.
func (l *listVal) rem(v []byte, count int64) int64 {
	n := l.n
	keep := make([]bool, n)
	removed := int64(0)
	limit := uint64(count)
	if count < 0 {
		limit = uint64(-(count + 1)) + 1
	}
	for k := range n {
		i := k
		if count < 0 {
			i = n - 1 - k
		}
		if (limit == 0 || uint64(removed) < limit) && string(l.at(i)) == string(v) {
			removed++
			continue
		}
		keep[i] = true
	}
	if removed == 0 {
		return 0
	}
	ring := make([]uint32, len(l.ring))
	m := 0
	for i := range n {
		r := *l.rec(i)
		if keep[i] {
			ring[m] = r
			m++
		} else {
			v, size := l.elem(r)
			l.garbage += size
			l.data -= int64(len(v))
		}
	}
	l.ring, l.head, l.n = ring, 0, m
	l.settle()
	return removed
}
