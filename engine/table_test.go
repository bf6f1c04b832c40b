package engine

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// checkStripe verifies a stripe's invariants: every slot reaches its entry from
// its home without crossing an empty slot, entries and slots correspond one to
// one, counts and arena accounting agree.
func checkStripe(t *testing.T, s *stripe) {
	t.Helper()
	mask := uint32(len(s.slots) - 1)
	seen := map[uint32]bool{}
	for p, sl := range s.slots {
		if sl == 0 {
			continue
		}
		idx := sl&^s.tagMask() - 1
		e := s.entry(idx)
		if e.rule == 0 {
			t.Fatalf("slot %d points at free entry %d", p, idx)
		}
		key := s.keyOf(e)
		hi := hiHash(xxhash.Sum64(key))
		if sl&s.tagMask() != hi&s.tagMask() {
			t.Fatalf("slot %d: tag mismatch", p)
		}
		for q := hi >> (32 - s.capBits); q != uint32(p); q = (q + 1) & mask {
			if s.slots[q] == 0 {
				t.Fatalf("slot %d: empty slot %d between it and its home", p, q)
			}
		}
		if seen[idx] {
			t.Fatalf("entry %d indexed twice", idx)
		}
		seen[idx] = true
	}
	live, bytesLive := 0, 0
	for idx := uint32(0); idx < s.slotsEnd(); idx++ {
		if s.pages[idx>>pageBits] == nil {
			continue
		}
		if e := s.entry(idx); e.rule != 0 {
			live++
			if !seen[idx] {
				t.Fatalf("entry %d not indexed", idx)
			}
			if e.klen == arenaKey {
				n := len(s.arena.key(e.arenaRef()))
				bytesLive += n + uvarintLen(uint64(n))
			}
		}
	}
	if live != len(seen) || int64(live) != s.count.Load() {
		t.Fatalf("live entries %d, indexed %d, count %d", live, len(seen), s.count.Load())
	}
	if bytesLive != s.arena.live {
		t.Fatalf("arena live %d, keys hold %d", s.arena.live, bytesLive)
	}
	refs := 0
	for id, rs := range s.rules.slots {
		if id > 0 {
			refs += int(rs.refs)
		}
	}
	if refs != live || len(s.rules.ids) > live {
		t.Fatalf("rule refs %d, rules %d, live %d", refs, len(s.rules.ids), live)
	}
}

// TestIndexChurn inserts and removes random keys of many lengths in a single
// stripe and checks the invariants against a map.
func TestIndexChurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	e := New(Config{Stripes: 1})
	s := e.stripes[0]
	want := map[string]bool{}
	var all []string
	for i := range 3000 {
		n := 1 + rng.IntN(40)
		switch rng.IntN(50) {
		case 0:
			n = 128 + rng.IntN(300) // two-byte length prefix
		case 1:
			n = arenaPageSize + rng.IntN(100) // a page of its own
		}
		k := make([]byte, n)
		for j := range k {
			k[j] = byte(rng.IntN(256))
		}
		k[0] = byte(i)
		all = append(all, string(k))
	}
	rules := []Rule{{KindFixed, 5, min_}, {KindFixed, 6, min_}, {KindLog, 5, min_}, {KindGCRA, 5, min_}}
	for step := range 30000 {
		k := all[rng.IntN(len(all))]
		if rng.IntN(3) == 0 {
			e.delete(t0, []byte(k))
			delete(want, k)
		} else {
			r := rules[int(k[0])%len(rules)]
			if rng.IntN(10) == 0 {
				r = rules[int(k[0]+1)%len(rules)]
			}
			res := e.Decide(t0, []byte(k), r, 1)
			if res.Err != nil && !want[k] {
				t.Fatalf("step %d: %v", step, res.Err)
			}
			want[k] = true
		}
		if step%3000 == 0 {
			checkStripe(t, s)
		}
	}
	checkStripe(t, s)
	if e.Len() != len(want) {
		t.Fatalf("Len %d, want %d", e.Len(), len(want))
	}
	for _, k := range all {
		_, _, ok := s.find(hiHash(xxhash.Sum64([]byte(k))), []byte(k))
		if ok != want[k] {
			t.Fatalf("key present %v, want %v", ok, want[k])
		}
	}
	// Remove everything: the stripe gives its memory back.
	for k := range want {
		e.delete(t0, []byte(k))
	}
	if s.pages != nil || s.slots != nil || len(s.arena.pages) != 0 || len(s.rules.slots) != 0 {
		t.Fatal("an empty stripe kept memory")
	}
}

// TestIndexWide fills one stripe past the point where slot tags no longer hold
// the home position (capBits+ib > 32), where moves rehash keys.
func TestIndexWide(t *testing.T) {
	n := 140_000
	if raceEnabled || testing.Short() {
		n = 70_000
	}
	e := New(Config{Stripes: 1})
	s := e.stripes[0]
	r := Rule{KindFixed, 5, min_}
	key := func(i int) []byte { return fmt.Appendf(nil, "k%07d", i) }
	for i := range n {
		e.Decide(t0, key(i), r, 1)
	}
	if int(s.capBits)+int(s.ib) <= 32 {
		t.Fatalf("capBits %d + ib %d: the wide case was not reached", s.capBits, s.ib)
	}
	for i := 0; i < n; i += 2 {
		e.delete(t0, key(i))
	}
	checkStripe(t, s)
	for i := range n {
		if got := e.inspect(t0, OpExists, key(i)).Count; got != int64(i%2) {
			t.Fatalf("key %d exists %d", i, got)
		}
	}
	// Every key still equal to itself after compaction and shrinking.
	var ks [][]byte
	ks = e.keys(t0, nil)
	if len(ks) != n/2 {
		t.Fatalf("KEYS %d", len(ks))
	}
	for _, k := range ks {
		if !bytes.HasPrefix(k, []byte("k")) {
			t.Fatalf("key %q", k)
		}
	}
	// Down to a hundred keys, the index shrinks and empty pages go.
	for i := 1; i < n; i += 2 {
		if i%1000 != 1 {
			e.delete(t0, key(i))
		}
	}
	checkStripe(t, s)
	pages := 0
	for _, p := range s.pages {
		if p != nil {
			pages++
		}
	}
	if got := e.Len(); got != (n+999)/1000 || len(s.slots) > 10*got || pages > got {
		t.Fatalf("%d keys: %d slots, %d pages", got, len(s.slots), pages)
	}
}
