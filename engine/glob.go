package engine

// globMatch reports whether s matches the Redis glob pattern (as Redis's
// stringmatchlen, case-sensitive): '*' any run of bytes, '?' any byte,
// '[abc]', '[^abc]' and '[a-z]' classes (a '\' in a class escapes the next
// byte; an unterminated class ends with the pattern), and '\x' the literal
// byte x. Every token but '*' matches exactly one byte, so the classic
// iterative algorithm that backtracks only to the latest '*' is exact and
// bounded by O(len(pattern) * len(s)) work, whatever the pattern.
func globMatch(pattern, s []byte) bool {
	if len(s) == 0 {
		// Redis never matches an empty string, even against "*".
		return len(pattern) == 0
	}
	p, i := 0, 0
	starP, starI := -1, 0
	for i < len(s) {
		if p < len(pattern) && pattern[p] == '*' {
			for p < len(pattern) && pattern[p] == '*' {
				p++
			}
			if p == len(pattern) {
				return true
			}
			starP, starI = p, i
			continue
		}
		if p < len(pattern) {
			if ok, next := globOne(pattern, p, s[i]); ok {
				p, i = next, i+1
				continue
			}
		}
		if starP < 0 {
			return false
		}
		starI++
		p, i = starP, starI
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// globOne matches the single-byte token at pattern[p] (not '*') against c and
// returns the position after the token.
func globOne(pattern []byte, p int, c byte) (bool, int) {
	n := len(pattern)
	switch pattern[p] {
	case '?':
		return true, p + 1
	case '\\':
		if p+1 < n {
			p++
		}
		return pattern[p] == c, p + 1
	case '[':
		p++
		not := p < n && pattern[p] == '^'
		if not {
			p++
		}
		match := false
		for {
			switch {
			case p+1 < n && pattern[p] == '\\':
				p++
				if pattern[p] == c {
					match = true
				}
			case p < n && pattern[p] == ']':
				return match != not, p + 1
			case p >= n:
				return match != not, n
			case p+2 < n && pattern[p+1] == '-':
				lo, hi := pattern[p], pattern[p+2]
				if lo > hi {
					lo, hi = hi, lo
				}
				if lo <= c && c <= hi {
					match = true
				}
				p += 2
			default:
				if pattern[p] == c {
					match = true
				}
			}
			p++
		}
	}
	return pattern[p] == c, p + 1
}
