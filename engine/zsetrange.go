package engine

import "bytes"

// The ranges of the sorted set ops (zsets.go): score and lexical bounds
// parsed as Redis parses them, and span, which turns an op's range of
// ranks, scores or members into ranks.

// ScoreBound is one end of a score range: a value, exclusive with "(".
type ScoreBound struct {
	V    float64
	Excl bool
}

// ParseScoreBound parses a ZRANGEBYSCORE bound as Redis's zslParseRange:
// "(" for exclusive, then strtod's number (inf, -inf), NaN refused.
func ParseScoreBound(b []byte) (ScoreBound, bool) {
	var sb ScoreBound
	if len(b) > 0 && b[0] == '(' {
		sb.Excl = true
		b = b[1:]
	}
	v, ok := parseStrtod(b)
	sb.V = v
	return sb, ok
}

// LexBound is one end of a lexical range: "-" (Min), "+" (Max), "[x"
// inclusive or "(x" exclusive.
type LexBound struct {
	V        []byte
	Excl     bool
	Min, Max bool
}

// ParseLexBound parses a BYLEX bound as Redis's zslParseLexRangeItem.
func ParseLexBound(b []byte) (LexBound, bool) {
	if len(b) == 0 {
		return LexBound{}, false
	}
	switch b[0] {
	case '+':
		return LexBound{Max: true}, len(b) == 1
	case '-':
		return LexBound{Min: true}, len(b) == 1
	case '(':
		return LexBound{V: b[1:], Excl: true}, true
	case '[':
		return LexBound{V: b[1:]}, true
	}
	return LexBound{}, false
}

// below reports whether member m lies below bound lo (as a minimum).
func (lo LexBound) below(m []byte) bool {
	switch {
	case lo.Min:
		return false
	case lo.Max:
		return true
	}
	c := bytes.Compare(m, lo.V)
	return c < 0 || c == 0 && lo.Excl
}

// within reports whether member m is not beyond bound hi (as a maximum).
func (hi LexBound) within(m []byte) bool {
	switch {
	case hi.Max:
		return true
	case hi.Min:
		return false
	}
	c := bytes.Compare(m, hi.V)
	return c < 0 || c == 0 && !hi.Excl
}

// span returns the ranks [lo, hi) of the op's score or lex range, or of
// its ranks; ok is false for an argument that does not parse.
func (z *zsetVal) span(flags uint32, minArg, maxArg []byte) (lo, hi uint32, ok bool) {
	n := uint32(z.n)
	switch {
	case flags&ZByScore != 0:
		mn, ok1 := ParseScoreBound(minArg)
		mx, ok2 := ParseScoreBound(maxArg)
		if !ok1 || !ok2 {
			return 0, 0, false
		}
		lo = z.countBefore(func(r uint32) bool {
			s := z.recs[r].score
			return s < mn.V || s == mn.V && mn.Excl
		})
		hi = z.countBefore(func(r uint32) bool {
			s := z.recs[r].score
			return s < mx.V || s == mx.V && !mx.Excl
		})
	case flags&ZByLex != 0:
		mn, ok1 := ParseLexBound(minArg)
		mx, ok2 := ParseLexBound(maxArg)
		if !ok1 || !ok2 {
			return 0, 0, false
		}
		lo = z.countBefore(func(r uint32) bool { return mn.below(z.keyAt(r)) })
		hi = z.countBefore(func(r uint32) bool { return mx.within(z.keyAt(r)) })
	default:
		start, ok1 := ParseInt(minArg)
		end, ok2 := ParseInt(maxArg)
		if !ok1 || !ok2 {
			return 0, 0, false
		}
		a, b := rankSpan(start, end, int64(n))
		return uint32(a), uint32(b), true
	}
	if hi < lo {
		hi = lo
	}
	return lo, hi, true
}
