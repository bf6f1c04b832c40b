package engine

import (
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Redis's numbers as text, parsed and printed as redis-server does them
// (docs/design.md, "Floats"): integers (string2ll), sorted set scores
// (strtod, "%.17g"), and INCRBYFLOAT's and HINCRBYFLOAT's x87 long double
// (64 bits of mantissa in math/big), so that every replica, and a client
// comparing with redis-server, sees the same bytes.

// incrBy adds d to v as INCRBY and HINCRBY do: ErrIncrOverflow when the
// sum overflows an int64.
func incrBy(v, d int64) (int64, error) {
	if d < 0 && v < 0 && d < math.MinInt64-v || d > 0 && v > 0 && d > math.MaxInt64-v {
		return 0, ErrIncrOverflow
	}
	return v + d, nil
}

// ParseScore parses b as Redis's string2d (strtod) parses a sorted set's
// score: the whole string, no spaces around it, "inf"/"-inf" and their
// spellings accepted, NaN and overflow refused. ParseLongDouble is
// INCRBYFLOAT's and HINCRBYFLOAT's.
func ParseScore(b []byte) (float64, bool) {
	if len(b) == 0 || len(b) > 5000 {
		return 0, false
	}
	if c := b[0]; c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' {
		return 0, false
	}
	if c := b[len(b)-1]; c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			// strtod overflows to ±HUGE_VAL with ERANGE, which Redis
			// refuses; underflow to 0 too.
			return 0, false
		}
		return 0, false
	}
	if math.IsNaN(f) {
		return 0, false
	}
	// Go accepts hexadecimal mantissas with 'p' exponents and
	// underscores, as strtod does not quite; refuse underscores.
	for _, c := range b {
		if c == '_' {
			return 0, false
		}
	}
	return f, true
}

// ParseLongDouble parses b as Redis's string2ld does (strtold, the whole
// string, no leading space, NaN and out-of-range values refused), into a
// float of the x87 long double's 64-bit mantissa, so HINCRBYFLOAT computes
// what redis-server computes on x86-64.
func ParseLongDouble(b []byte) (*big.Float, bool) {
	if len(b) == 0 || len(b) >= 5*1024 || isSpace(b[0]) {
		return nil, false
	}
	for _, c := range b {
		if c == '_' || c == 0 || isSpace(c) {
			return nil, false
		}
	}
	s := string(b)
	low := strings.ToLower(strings.TrimLeft(s, "+-"))
	if low == "inf" || low == "infinity" {
		return new(big.Float).SetInf(s[0] == '-'), true
	}
	if strings.HasPrefix(low, "nan") || strings.HasPrefix(low, "inf") {
		return nil, false
	}
	f, _, err := big.ParseFloat(s, 0, 64, big.ToNearestEven)
	if err != nil || !longDoubleRange(f) {
		return nil, false
	}
	return f, true
}

// longDoubleRange reports whether a finite f is within a long double's
// exponent range (and not an underflow to zero from a non-zero input).
func longDoubleRange(f *big.Float) bool {
	if f.IsInf() {
		return false
	}
	return f.Sign() == 0 || f.MantExp(nil) <= 16384 && f.MantExp(nil) > -16445
}

// AddLongDouble returns a+b rounded to a long double, or false when the
// sum overflows it.
func AddLongDouble(a, b *big.Float) (*big.Float, bool) {
	s := new(big.Float).SetPrec(64).SetMode(big.ToNearestEven).Add(a, b)
	if s.IsInf() || s.Sign() != 0 && s.MantExp(nil) > 16384 {
		return nil, false
	}
	return s, true
}

// FormatLongDouble appends f as Redis's INCRBYFLOAT and HINCRBYFLOAT print
// it (ld2string's human-friendly form: "%.17Lf", trailing zeros and point
// trimmed, "-0" as "0").
func FormatLongDouble(b []byte, f *big.Float) []byte {
	start := len(b)
	b = f.Append(b, 'f', 17)
	end := len(b)
	if indexByte(b[start:], '.') >= 0 {
		for end > start && b[end-1] == '0' {
			end--
		}
		if end > start && b[end-1] == '.' {
			end--
		}
	}
	b = b[:end]
	if string(b[start:]) == "-0" {
		b = append(b[:start], '0')
	}
	return b
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// FormatScore appends a score as redis-server 7.0 prints a double
// (addReplyDouble: "%.17g", "inf" and "-inf").
func FormatScore(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "inf"...)
	case math.IsInf(v, -1):
		return append(b, "-inf"...)
	}
	return appendG17(b, v)
}

// appendG17 is C's printf("%.17g", v) for a finite v.
func appendG17(b []byte, v float64) []byte {
	if v == 0 {
		if math.Signbit(v) {
			return append(b, "-0"...)
		}
		return append(b, '0')
	}
	// %g: exponent X of %e with precision P-1; if P > X >= -4 use %f with
	// precision P-1-X, else %e with precision P-1; then trailing zeros
	// removed.
	e := strconv.AppendFloat(nil, v, 'e', 16, 64)
	// exponent after 'e'
	k := len(e) - 1
	for e[k] != 'e' {
		k--
	}
	x, _ := strconv.Atoi(string(e[k+1:]))
	if x < 17 && x >= -4 {
		return append(b, trimFraction(strconv.AppendFloat(nil, v, 'f', 16-x, 64))...)
	}
	b = append(b, trimFraction(e[:k])...)
	b = append(b, 'e')
	if x < 0 {
		b = append(b, '-')
		x = -x
	} else {
		b = append(b, '+')
	}
	if x < 10 {
		b = append(b, '0')
	}
	return strconv.AppendInt(b, int64(x), 10)
}

func indexByte(b []byte, c byte) int {
	for i := range b {
		if b[i] == c {
			return i
		}
	}
	return -1
}

// trimFraction drops the trailing zeros of a number's fraction, and its
// point when nothing is left after it (%g's rule).
func trimFraction(f []byte) []byte {
	i := indexByte(f, '.')
	if i < 0 {
		return f
	}
	end := len(f)
	for end > i && f[end-1] == '0' {
		end--
	}
	if end-1 == i {
		end--
	}
	return f[:end]
}

// parseStrtod is zslParseRange's strtod: leading spaces skipped, the
// rest wholly a number, an empty string 0, out-of-range values saturated
// (strtod's HUGE_VAL, which Redis does not look at errno for), NaN
// refused.
func parseStrtod(b []byte) (float64, bool) {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, true
	}
	for _, c := range b {
		if c == '_' || c == 0 {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); !ok || ne.Err != strconv.ErrRange {
			return 0, false
		}
	}
	return f, !math.IsNaN(f)
}

// ParseInt parses b as Redis parses a 64-bit integer value (string2ll): an
// optional '-', no '+', no leading zeros or spaces, at most 20 bytes.
func ParseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) >= 21 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := b[0] == '-'
	p := b
	if neg {
		p = p[1:]
		if len(p) == 0 {
			return 0, false
		}
	}
	if p[0] < '1' || p[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range p {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > math.MaxUint64/10 {
			return 0, false
		}
		v *= 10
		if v > math.MaxUint64-uint64(c-'0') {
			return 0, false
		}
		v += uint64(c - '0')
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}
