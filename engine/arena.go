package engine

import (
	"encoding/binary"
	"fmt"
)

// arena holds a stripe's long keys (longer than inlineKey) in pages, each key length-prefixed
// (uvarint). A reference is page<<arenaPageBits | offset. Keys too long for a
// page get a page of their own. Freed bytes are counted as garbage; the stripe
// compacts the arena when garbage exceeds live bytes (see stripe.compactArena).
type arena struct {
	pages   [][]byte
	cur     int // the page small keys are appended to, -1 for none
	live    int // bytes of live keys, prefixes included
	garbage int // bytes of freed keys
}

const (
	arenaPageBits = 13
	arenaPageSize = 1 << arenaPageBits
	maxArenaPages = 1 << (32 - arenaPageBits)
)

func (a *arena) reset() { *a = arena{cur: -1} }

// add copies key into the arena and returns its reference.
func (a *arena) add(key []byte) uint32 {
	var pre [binary.MaxVarintLen64]byte
	np := binary.PutUvarint(pre[:], uint64(len(key)))
	need := np + len(key)
	a.live += need
	if need > arenaPageSize {
		buf := make([]byte, 0, need)
		buf = append(append(buf, pre[:np]...), key...)
		return a.addPage(buf) << arenaPageBits
	}
	if a.cur < 0 || len(a.pages[a.cur])+need > arenaPageSize {
		a.cur = int(a.addPage(make([]byte, 0, arenaPageSize)))
	}
	p := a.pages[a.cur]
	off := len(p)
	p = append(append(p, pre[:np]...), key...)
	a.pages[a.cur] = p
	return uint32(a.cur)<<arenaPageBits | uint32(off)
}

func (a *arena) addPage(p []byte) uint32 {
	if len(a.pages) >= maxArenaPages {
		// 4 GiB of keys in one stripe: configure more stripes.
		panic(fmt.Sprintf("engine: key arena of a stripe is full (%d pages)", len(a.pages)))
	}
	a.pages = append(a.pages, p)
	return uint32(len(a.pages) - 1)
}

// key returns the key bytes at ref (aliasing the arena).
func (a *arena) key(ref uint32) []byte {
	p := a.pages[ref>>arenaPageBits]
	off := int(ref & (arenaPageSize - 1))
	n, k := int(p[off]), 1
	if n >= 0x80 {
		u, w := binary.Uvarint(p[off:])
		n, k = int(u), w
	}
	return p[off+k : off+k+n]
}

// free accounts the key at ref as garbage.
func (a *arena) free(ref uint32) {
	n := len(a.key(ref))
	n += uvarintLen(uint64(n))
	a.live -= n
	a.garbage += n
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}
