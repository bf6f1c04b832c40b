package engine

import (
	"math"
	"strconv"
)

// The float helpers of the commands that keep numbers as text in 64-bit
// floats (INCRBYFLOAT, HINCRBYFLOAT): one parser and one formatter, so
// every such command reads and writes a value as the others do. Redis
// computes in long double; sluice in float64, and its replies equal
// redis-server's whenever the result is exactly representable
// (docs/design.md, "Floats").

// maxFloatLen is the longest text ParseFloat accepts (Redis's
// MAX_LONG_DOUBLE_CHARS).
const maxFloatLen = 5 * 1024

// ParseFloat parses b as Redis parses a float value or argument (string2ld:
// strtold over the whole text): decimal or hexadecimal, an optional sign,
// "inf" and "infinity" in any case; no space before or after, no NaN, not
// empty. A decimal beyond float64's range parses as an infinity (Redis's
// long double would hold it: the increment then fails as one producing
// Infinity).
func ParseFloat(b []byte) (float64, bool) {
	if len(b) == 0 || len(b) >= maxFloatLen {
		return 0, false
	}
	hex := false
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9', c == '.', c == '+', c == '-':
		case c == 'x' || c == 'X':
			hex = true
		case c == 'p' || c == 'P':
			hex = false // has its binary exponent
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			// e, inf, infinity, hex digits: strconv judges them.
		default:
			return 0, false // spaces, underscores, NUL
		}
	}
	s := string(b)
	if hex {
		s += "p0" // strtold takes a hex mantissa without an exponent
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && !math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, false
	}
	return v, true
}

// AppendFloat appends v as Redis replies and stores the result of
// INCRBYFLOAT (ld2string's human mode: %.17Lf, then the trailing zeros and
// point trimmed; "-0" is "0"), v not being NaN or an infinity. Where
// long double carries digits float64 does not, the text is float64's
// shortest that reads back as v, when that has at most 15 significant
// digits and 17 decimals: 0.1 stays "0.1" where the exact expansion of
// float64's 0.1 would print 0.10000000000000001 (redis-server prints
// 0.1).
func AppendFloat(dst []byte, v float64) []byte {
	start := len(dst)
	var tmp [32]byte
	short := strconv.AppendFloat(tmp[:0], v, 'g', 15, 64)
	if r, err := strconv.ParseFloat(string(short), 64); err == nil && r == v {
		dst = strconv.AppendFloat(dst, v, 'f', -1, 64)
		if dot := lastDot(dst[start:]); dot < 0 || len(dst)-start-dot-1 <= 17 {
			return fixNegZero(dst, start)
		}
		dst = dst[:start]
	}
	dst = strconv.AppendFloat(dst, v, 'f', 17, 64)
	if lastDot(dst[start:]) >= 0 {
		for dst[len(dst)-1] == '0' {
			dst = dst[:len(dst)-1]
		}
		if dst[len(dst)-1] == '.' {
			dst = dst[:len(dst)-1]
		}
	}
	return fixNegZero(dst, start)
}

func lastDot(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '.' {
			return i
		}
	}
	return -1
}

// fixNegZero turns a text "-0" at dst[start:] into "0", as Redis does.
func fixNegZero(dst []byte, start int) []byte {
	if len(dst)-start == 2 && dst[start] == '-' && dst[start+1] == '0' {
		dst[start] = '0'
		dst = dst[:start+1]
	}
	return dst
}
