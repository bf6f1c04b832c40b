package engine

import (
	"testing"
)

// TestDigest: engines that ran the same operations agree, whatever their
// sweeps reclaimed; a different state or clock gives another digest.
func TestDigest(t *testing.T) {
	ops := func(e *Engine) {
		e.Decide(t0, []byte("a"), Rule{KindToken, 5, sec}, 2)
		e.Decide(t0, []byte("b"), Rule{KindLog, 3, min_}, 1)
		e.Decide(t0, []byte("gone"), Rule{KindFixed, 3, sec}, 1)
		e.Apply(t0+2*sec, []Op{{Code: OpDecide, Key: []byte("c"), Rule: Rule{KindGCRA, 4, sec}, Cost: 1}}, make([]Result, 1))
	}
	a, b := New(Config{Stripes: 4}), New(Config{Stripes: 4})
	ops(a)
	ops(b)
	b.Sweep(t0+2*sec, 1<<20) // reclaims "gone" (its window ended) on b only
	da, na := a.Digest()
	db, nb := b.Digest()
	if da != db || na != nb {
		t.Fatalf("same operations, digests %x (%d keys) and %x (%d keys)", da, na, db, nb)
	}
	if na != 2 { // b and c: a is full again and gone's window ended
		t.Fatalf("%d live keys, want 2", na)
	}
	b.Decide(t0+2*sec, []byte("a"), Rule{KindToken, 5, sec}, 1)
	if db2, _ := b.Digest(); db2 == da {
		t.Fatal("a decision did not change the digest")
	}
	c := New(Config{Stripes: 4})
	ops(c)
	c.Apply(t0+3*sec, nil, nil)
	if dc, _ := c.Digest(); dc == da {
		t.Fatal("a later clock did not change the digest")
	}
}
