package bench

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestZipfMatchesTheLaw(t *testing.T) {
	const n, draws = 1000, 400_000
	z := NewZipfTable(n, ZipfTheta)
	p := NewKeyPicker(DistZipf, n, rand.New(rand.NewPCG(1, 2)), z)
	counts := make([]int, n)
	for range draws {
		i := p()
		if i >= n {
			t.Fatalf("draw %d out of [0, %d)", i, n)
		}
		counts[i]++
	}
	// the generator is exact for the two hottest items and close beyond
	for i, tol := range []float64{0.02, 0.03} {
		got := float64(counts[i]) / draws
		want := zipfProb(z, uint64(i))
		if math.Abs(got-want)/want > tol {
			t.Errorf("item %d: frequency %.4f, want %.4f (±%.0f%%)", i, got, want, tol*100)
		}
	}
	// hot keys: the top 1% of the items take far more than 1% of the draws
	top := 0
	for i := range n / 100 {
		top += counts[i]
	}
	if share := float64(top) / draws; share < 0.3 {
		t.Errorf("top 1%% of keys drew %.2f of the requests, want a hot-key skew (> 0.3)", share)
	}
	// and the tail is reached
	tail := 0
	for i := n / 2; i < n; i++ {
		tail += counts[i]
	}
	if tail == 0 {
		t.Error("no draw in the upper half of the keys")
	}
	// frequencies fall with the rank, over buckets of ranks
	prev := math.MaxInt
	for lo := 0; lo < n; lo += 100 {
		s := 0
		for i := lo; i < lo+100; i++ {
			s += counts[i]
		}
		if s > prev {
			t.Errorf("ranks %d-%d drew %d, more than the ranks before (%d)", lo, lo+99, s, prev)
		}
		prev = s
	}
}

func TestZipfProbabilitiesSumToOne(t *testing.T) {
	z := NewZipfTable(5000, ZipfTheta)
	sum := 0.0
	for i := uint64(0); i < 5000; i++ {
		sum += zipfProb(z, i)
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("probabilities sum to %g", sum)
	}
}

func TestUniformAndHotPickers(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	u := NewKeyPicker(DistUniform, 10, rng, nil)
	seen := map[uint64]int{}
	for range 10_000 {
		i := u()
		if i >= 10 {
			t.Fatalf("uniform draw %d out of range", i)
		}
		seen[i]++
	}
	for i := uint64(0); i < 10; i++ {
		if c := seen[i]; c < 800 || c > 1200 {
			t.Errorf("uniform key %d drawn %d times of 10000", i, c)
		}
	}
	h := NewKeyPicker(DistHot, 1000, rng, nil)
	for range 100 {
		if h() != 0 {
			t.Fatal("hot picker drew another key")
		}
	}
	// a Zipf picker without a table, or with one of another size, builds its own
	z := NewKeyPicker(DistZipf, 7, rng, NewZipfTable(100, ZipfTheta))
	for range 1000 {
		if z() >= 7 {
			t.Fatal("zipf draw out of range")
		}
	}
}

func TestAppendKey(t *testing.T) {
	for _, c := range []struct {
		i    uint64
		want string
	}{{0, "tb:000000000000"}, {42, "tb:000000000042"}, {123456789012, "tb:123456789012"}, {1234567890123, "tb:1234567890123"}} {
		if got := string(AppendKey(nil, "tb:", c.i)); got != c.want {
			t.Errorf("AppendKey(%d) = %q, want %q", c.i, got, c.want)
		}
	}
}

func TestParseDist(t *testing.T) {
	for _, s := range []string{"uniform", "zipf", "hot"} {
		if _, err := ParseDist(s); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseDist("gauss"); err == nil {
		t.Error("ParseDist(gauss) succeeded")
	}
}

// zipfProb is the probability of item i (0-based) under the exact Zipf law
// of t, which Draw must follow.
func zipfProb(t *ZipfTable, i uint64) float64 {
	return 1 / math.Pow(float64(i+1), t.theta) / t.zetan
}
