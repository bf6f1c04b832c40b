// Package cursor reads the binary encodings sluice writes (the Raft log's
// entries and the forwarding wire in cluster, snapshots in persistence):
// bytes, uvarints, varints and length-prefixed strings from a byte slice,
// with a sticky error. It never panics and never allocates: a string it
// returns aliases the input.
package cursor

import (
	"encoding/binary"
	"fmt"
)

// Cursor reads from B. The first failure is kept in Err, B is emptied, and
// every later read returns zero values, so a decoder may read a whole
// structure and check Err once.
type Cursor struct {
	B   []byte // what is left to read
	Err error  // the first failure, or nil

	wrap error  // wrapped by every failure
	verb string // how a failed read is described ("truncated")
}

// New returns a cursor over b whose failures wrap sentinel (so callers can
// errors.Is them) and describe a failed read as verb and what was read,
// e.g. "truncated varint".
func New(b []byte, sentinel error, verb string) Cursor {
	return Cursor{B: b, wrap: sentinel, verb: verb}
}

// Fail records that what could not be read, unless a failure is already
// recorded, and empties B.
func (c *Cursor) Fail(what string) {
	if c.Err == nil {
		c.Err = fmt.Errorf("%w: %s %s", c.wrap, c.verb, what)
	}
	c.B = nil
}

// Failf records a failure of its own wording (wrapping the sentinel),
// unless one is already recorded, and empties B.
func (c *Cursor) Failf(format string, args ...any) {
	if c.Err == nil {
		c.Err = fmt.Errorf("%w: "+format, append([]any{c.wrap}, args...)...)
	}
	c.B = nil
}

// Byte reads one byte.
func (c *Cursor) Byte() byte {
	if c.Err != nil {
		return 0
	}
	if len(c.B) == 0 {
		c.Fail("byte")
		return 0
	}
	v := c.B[0]
	c.B = c.B[1:]
	return v
}

// Uvarint reads an unsigned varint.
func (c *Cursor) Uvarint() uint64 { return c.uvarint("uvarint") }

// Varint reads a signed (zig-zag) varint, as binary.Varint does.
func (c *Cursor) Varint() int64 {
	u := c.uvarint("varint")
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

// uvarint reads an unsigned varint; what names it in a failure.
func (c *Cursor) uvarint(what string) uint64 {
	if c.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(c.B)
	if n <= 0 {
		c.Fail(what)
		return 0
	}
	c.B = c.B[n:]
	return v
}

// Bytes reads a length-prefixed string of at most limit bytes. The result
// aliases the input, capped at its length so that appending to it cannot
// overwrite what follows.
func (c *Cursor) Bytes(limit int) []byte {
	n := c.Uvarint()
	if c.Err != nil {
		return nil
	}
	if n > uint64(limit) {
		c.Failf("string of %d bytes exceeds %d", n, limit)
		return nil
	}
	if n > uint64(len(c.B)) {
		c.Fail("string")
		return nil
	}
	v := c.B[:n:n]
	c.B = c.B[n:]
	return v
}
