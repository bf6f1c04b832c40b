package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
)

// Dist names a key distribution: DistUniform picks each of the N keys
// with the same probability; DistZipf picks key i with probability
// proportional to 1/(i+1)^ZipfTheta (YCSB's Zipfian constant): a few hot
// keys and a long tail; DistHot sends every request to one key.
type Dist string

// The key distributions.
const (
	DistUniform Dist = "uniform"
	DistZipf    Dist = "zipf"
	DistHot     Dist = "hot"
	ZipfTheta        = 0.99
)

// ParseDist parses a distribution name.
func ParseDist(s string) (Dist, error) {
	if d := Dist(s); d == DistUniform || d == DistZipf || d == DistHot {
		return d, nil
	}
	return "", fmt.Errorf("unknown key distribution %q (want uniform, zipf or hot)", s)
}

// NewKeyPicker returns a function that draws key indexes in [0, n) with
// distribution d from rng; each goroutine needs its own (rng is not
// shared). z may be a shared precomputed Zipf table for (n, ZipfTheta), or
// nil to compute one.
func NewKeyPicker(d Dist, n uint64, rng *rand.Rand, z *ZipfTable) func() uint64 {
	n = max(n, 1)
	switch d {
	case DistHot:
		return func() uint64 { return 0 }
	case DistZipf:
		if z == nil || z.n != n {
			z = NewZipfTable(n, ZipfTheta)
		}
		return func() uint64 { return z.Draw(rng.Float64()) }
	}
	return func() uint64 { return rng.Uint64N(n) }
}

// ZipfTable holds the constants of the Zipfian generator of Gray et al.,
// "Quickly generating billion-record synthetic databases" (SIGMOD 1994), as
// YCSB uses it. It draws in O(1) for any theta in (0, 1), which
// math/rand's Zipf (s > 1 only) does not cover. It is immutable and may be
// shared between goroutines.
type ZipfTable struct {
	n                              uint64
	theta, alpha, zetan, eta, half float64
}

// NewZipfTable precomputes the generator for n items and skew theta in
// (0, 1). It takes O(n) time once (about 20 ms per million items).
func NewZipfTable(n uint64, theta float64) *ZipfTable {
	zetan := 0.0
	for i := uint64(1); i <= n; i++ {
		zetan += 1 / math.Pow(float64(i), theta)
	}
	half := 1 + math.Pow(0.5, theta) // zeta(2)
	eta := (1 - math.Pow(2/float64(n), 1-theta)) / (1 - half/zetan)
	return &ZipfTable{n: n, theta: theta, alpha: 1 / (1 - theta), zetan: zetan, eta: eta, half: half}
}

// Draw maps a uniform u in [0, 1) to an item in [0, n).
func (t *ZipfTable) Draw(u float64) uint64 {
	switch uz := u * t.zetan; {
	case uz < 1:
		return 0
	case uz < t.half:
		return 1 % t.n
	}
	return min(uint64(float64(t.n)*math.Pow(t.eta*u-t.eta+1, t.alpha)), t.n-1)
}

// KeyDigits is the width of the zero-padded index in key names, as in the
// anchor measurement's "tb:" + 12 digits.
const KeyDigits = 12

// AppendKey appends prefix followed by i as KeyDigits zero-padded digits.
func AppendKey(b []byte, prefix string, i uint64) []byte {
	var tmp [20]byte
	d := strconv.AppendUint(tmp[:0], i, 10)
	b = append(b, prefix...)
	for range KeyDigits - len(d) {
		b = append(b, '0')
	}
	return append(b, d...)
}
