package resp

// The argument grammar (docs/commands.md, "Argument grammar"): integers,
// durations and rates, parsed from the raw argument bytes with no allocation
// on success and exact integer arithmetic (no floats).
//
// Numbers are plain ASCII decimals: no sign, no exponent, no spaces, and no
// leading zeros (a lone "0" is fine, and so is "0.5"), as Redis's own
// integer parser (string2ll) demands. The one exception is a COST, which
// may be a refund: a minus sign, then digits (leading zeros allowed) worth
// 1 to 2^53. Errors name the argument, quote it,
// and give the reason:
//
//	ERR invalid capacity 'abc': must be an integer from 0 to 9007199254740992
//	ERR invalid window '0': must be a duration from 1ms to 366d
//	ERR invalid rate '0': must be a positive number or N/duration

import (
	"bytes"
	"math/bits"

	"github.com/sluice-rl/sluice/engine"
)

const (
	maxInteger    = engine.MaxCount
	nsPerMs       = 1_000_000
	nsPerSecond   = 1_000_000_000
	maxDurationNs = engine.MaxPeriod
	// maxSigDigits bounds the significant digits of a rate's number and
	// the digits of a duration's number: 10^18 fits a uint64 with room.
	maxSigDigits = 18
	// maxQuotedArg is the most of the raw argument an error quotes.
	maxQuotedArg = 64
)

// The reasons of argument errors. The bounds they quote are the engine's
// (engine.MaxCount, engine.MaxPeriodDays); TestReasonsQuoteEngineBounds
// keeps them in step.
const (
	reasonInteger        = "must be an integer from 0 to 9007199254740992"
	reasonCost           = "must be an integer from -9007199254740992 to 9007199254740992, -0 excluded"
	reasonLeadingZero    = "must not have leading zeros"
	reasonDurationSyntax = "must be an integer with an optional unit ms, s, m, h or d"
	reasonDuration       = "must be a duration from 1ms to 366d"
	reasonRate           = "must be a positive number or N/duration"
	reasonRateDigits     = "must have at most 18 significant digits"
	reasonRateFast       = "must be at most 1000000000 per second"
	reasonRateSlow       = "must be at least 1 per 366d"
)

// ArgError is an invalid argument. Its Error text is the Redis error reply
// without the leading '-': ERR invalid <Name> '<Value>': <Reason>.
type ArgError struct {
	Name   string // the argument's name, e.g. "rate"
	Value  string // the raw argument, quoted safely (see NewArgError)
	Reason string // e.g. "must be a positive number or N/duration"
}

// Error returns the reply text, e.g.
// "ERR invalid rate '0': must be a positive number or N/duration".
func (e *ArgError) Error() string {
	return msgArg.Text(e.Name, e.Value, e.Reason)
}

// NewArgError returns the error for argument name with raw value b. At most
// 64 bytes of b are quoted ("..." marks the cut), and bytes outside
// printable ASCII are written \xHH, so that the reply can never hold \r or
// \n.
func NewArgError(name string, b []byte, reason string) *ArgError {
	const hex = "0123456789abcdef"
	cut := len(b) > maxQuotedArg
	if cut {
		b = b[:maxQuotedArg]
	}
	v := make([]byte, 0, len(b)+3)
	for _, c := range b {
		if c >= 0x20 && c < 0x7f {
			v = append(v, c)
		} else {
			v = append(v, '\\', 'x', hex[c>>4], hex[c&15])
		}
	}
	if cut {
		v = append(v, "..."...)
	}
	return &ArgError{Name: name, Value: string(v), Reason: reason}
}

// ParseInteger parses a decimal integer 0 <= n <= 2^53; name is the
// argument's name for the error message.
func ParseInteger(name string, b []byte) (int64, error) {
	n := digitRun(b)
	if n == 0 || n != len(b) {
		return 0, NewArgError(name, b, reasonInteger)
	}
	if n > 1 && b[0] == '0' {
		return 0, NewArgError(name, b, reasonLeadingZero)
	}
	if n > 16 {
		return 0, NewArgError(name, b, reasonInteger)
	}
	v := digitValue(b)
	if v > maxInteger {
		return 0, NewArgError(name, b, reasonInteger)
	}
	return int64(v), nil
}

// ParseCost parses a COST: an integer as ParseInteger takes, or a refund
// written with a minus sign, "-n" with 1 <= n <= 2^53, whose digits may
// have leading zeros ("-007" is -7). "-0", "--1", "-" and "+1" are errors.
func ParseCost(name string, b []byte) (int64, error) {
	if len(b) == 0 || b[0] != '-' {
		return ParseInteger(name, b)
	}
	d := b[1:]
	n := digitRun(d)
	if n == 0 || n != len(d) {
		return 0, NewArgError(name, b, reasonCost)
	}
	for n > 1 && d[0] == '0' { // leading zeros after the sign are fine
		d, n = d[1:], n-1
	}
	if n > 16 {
		return 0, NewArgError(name, b, reasonCost)
	}
	v := digitValue(d)
	if v == 0 || v > maxInteger {
		return 0, NewArgError(name, b, reasonCost)
	}
	return -int64(v), nil
}

// ParseDuration parses an integer with an optional unit ms, s, m, h or d
// (case-insensitive; a bare integer is seconds), from 1ms to 366d, and
// returns it in nanoseconds.
func ParseDuration(name string, b []byte) (int64, error) {
	n := digitRun(b)
	unit, ok := unitNanos(b[n:])
	if n == 0 || !ok {
		return 0, NewArgError(name, b, reasonDurationSyntax)
	}
	if n > 1 && b[0] == '0' {
		return 0, NewArgError(name, b, reasonLeadingZero)
	}
	if n > maxSigDigits {
		return 0, NewArgError(name, b, reasonDuration)
	}
	v := digitValue(b[:n])
	if v == 0 || v > maxDurationNs/unit {
		return 0, NewArgError(name, b, reasonDuration)
	}
	return int64(v * unit), nil
}

// ParseRate parses a rate: a positive decimal number of units per second
// ("10", "0.5"), or N/DURATION where DURATION may omit its number ("10/s",
// "60/m", "0.5/s", "5/500ms", "100/1d"). It must be at least 1 per 366d and
// at most 1e9 per second, and N may have at most 18 significant digits. It
// returns the emission interval, floor(duration / N) in nanoseconds,
// computed exactly: "7/10s" is 1428571428.
func ParseRate(name string, b []byte) (int64, error) {
	num, dur, slash := bytes.Cut(b, []byte{'/'})

	// Syntax: N is int[.frac]; DURATION is [digits][unit], not empty.
	ni := digitRun(num)
	if ni == 0 {
		return 0, NewArgError(name, b, reasonRate)
	}
	intPart, frac := num[:ni], []byte(nil)
	if rest := num[ni:]; len(rest) > 0 {
		frac = rest[1:]
		if rest[0] != '.' || len(frac) == 0 || digitRun(frac) != len(frac) {
			return 0, NewArgError(name, b, reasonRate)
		}
	}
	unit, di := uint64(nsPerSecond), 0
	if slash {
		di = digitRun(dur)
		var ok bool
		unit, ok = unitNanos(dur[di:])
		if !ok || len(dur) == 0 {
			return 0, NewArgError(name, b, reasonRate)
		}
	}
	if ni > 1 && intPart[0] == '0' || di > 1 && dur[0] == '0' {
		return 0, NewArgError(name, b, reasonLeadingZero)
	}

	// N = m / 10^e, exactly.
	frac = bytes.TrimRight(frac, "0")
	var m uint64
	sig := 0
	for _, part := range [2][]byte{intPart, frac} {
		for _, c := range part {
			if sig == 0 && c == '0' {
				continue
			}
			if sig++; sig > maxSigDigits {
				return 0, NewArgError(name, b, reasonRateDigits)
			}
			m = m*10 + uint64(c-'0')
		}
	}
	d := uint64(1)
	if di > 0 {
		if di > maxSigDigits {
			return 0, NewArgError(name, b, reasonRateDigits)
		}
		d = digitValue(dur[:di])
	}
	if m == 0 || d == 0 {
		return 0, NewArgError(name, b, reasonRate)
	}

	// interval = floor(d*unit * 10^e / m), with d*unit < 2^107.
	hi, lo := bits.Mul64(d, unit)
	q, exact, over := scaledQuotient(hi, lo, m, len(frac), maxDurationNs)
	if over || q == maxDurationNs && !exact {
		return 0, NewArgError(name, b, reasonRateSlow)
	}
	if q == 0 {
		return 0, NewArgError(name, b, reasonRateFast)
	}
	return int64(q), nil
}

// scaledQuotient returns q = floor(x * 10^e / m) for the 128-bit x = hi:lo
// and 0 < m < 10^18, and whether the division is exact; over reports that
// q > limit (then q and exact are meaningless). It is long division, one
// decimal digit per step, so it never overflows; since q grows tenfold a
// step once it is positive, it stops after a few dozen steps at most, for
// any e.
func scaledQuotient(hi, lo, m uint64, e int, limit uint64) (q uint64, exact, over bool) {
	if hi >= m {
		return 0, false, true // q >= 2^64
	}
	q, r := bits.Div64(hi, lo, m)
	if q > limit {
		return 0, false, true
	}
	for ; e > 0; e-- {
		// r < m < 10^18, so r*10 fits; q <= limit < 2^60, so q*10+9 fits.
		digit, r2 := bits.Div64(0, r*10, m)
		q, r = q*10+digit, r2
		if q > limit {
			return 0, false, true
		}
	}
	return q, r == 0, false
}

// digitRun returns the length of the run of ASCII digits that starts b.
func digitRun(b []byte) int {
	for i, c := range b {
		if c < '0' || c > '9' {
			return i
		}
	}
	return len(b)
}

// digitValue returns the value of the ASCII digits d (at most 19 of them).
func digitValue(d []byte) uint64 {
	var v uint64
	for _, c := range d {
		v = v*10 + uint64(c-'0')
	}
	return v
}

// unitNanos returns the nanoseconds of a duration unit, case-insensitive;
// no unit is seconds.
func unitNanos(u []byte) (uint64, bool) {
	switch len(u) {
	case 0:
		return nsPerSecond, true
	case 1:
		switch u[0] | 0x20 {
		case 's':
			return nsPerSecond, true
		case 'm':
			return 60 * nsPerSecond, true
		case 'h':
			return 3600 * nsPerSecond, true
		case 'd':
			return 86400 * nsPerSecond, true
		}
	case 2:
		if u[0]|0x20 == 'm' && u[1]|0x20 == 's' {
			return nsPerMs, true
		}
	}
	return 0, false
}
