// Package slots maps keys to Redis Cluster hash slots and slots to Raft
// groups.
//
// A key's slot is CRC16 (XMODEM: polynomial 0x1021, initial value 0, no
// reflection) of the key modulo 16384, exactly as Redis Cluster computes it;
// when the key holds a non-empty hash tag (the bytes between the first '{'
// and the first '}' after it) only the tag is hashed, so keys sharing a tag
// share a slot. A Table assigns contiguous slot ranges to groups.
package slots

import "fmt"

// Count is the number of hash slots, as in Redis Cluster.
const Count = 16384

// crcTable is the CRC16-XMODEM lookup table, computed at package
// initialisation and never written afterwards.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// crc16 is CRC16-XMODEM of b.
func crc16(b []byte) uint16 {
	var c uint16
	for _, x := range b {
		c = c<<8 ^ crcTable[byte(c>>8)^x]
	}
	return c
}

// HashTag returns the part of key that decides its slot: the bytes between
// the first '{' and the next '}' when that is not empty, else all of key.
func HashTag(key []byte) []byte {
	for i, ch := range key {
		if ch != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j == i+1 {
					return key // "{}": the whole key is hashed
				}
				return key[i+1 : j]
			}
		}
		return key // no closing brace
	}
	return key
}

// Of returns key's hash slot, 0 to Count-1.
func Of(key []byte) int {
	return int(crc16(HashTag(key)) % Count)
}

// Range is an inclusive range of slots, as CLUSTER SLOTS reports them.
type Range struct {
	First, Last int
}

// Table maps every slot to a group: groups own contiguous ranges, group i
// the i-th range. Today a cluster has one group owning every slot; the
// table is what a sharded cluster will consult.
type Table struct {
	ranges []Range // ranges[g] is group g's; together they cover 0..Count-1 in order
}

// Even returns the table of n groups splitting the slots into contiguous
// ranges of nearly equal size (the first Count%n ranges one slot larger).
func Even(n int) (Table, error) {
	if n < 1 || n > Count {
		return Table{}, fmt.Errorf("slots: %d groups: want 1 to %d", n, Count)
	}
	t := Table{ranges: make([]Range, n)}
	first := 0
	for g := range n {
		size := Count / n
		if g < Count%n {
			size++
		}
		t.ranges[g] = Range{First: first, Last: first + size - 1}
		first += size
	}
	return t, nil
}

// Groups returns the number of groups.
func (t Table) Groups() int { return len(t.ranges) }

// Range returns group g's slots.
func (t Table) Range(g int) Range { return t.ranges[g] }

// Group returns the group owning slot.
func (t Table) Group(slot int) int {
	lo, hi := 0, len(t.ranges)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if t.ranges[mid].Last < slot {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}
