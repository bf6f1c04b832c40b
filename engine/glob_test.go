package engine

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		pattern, s string
		want       bool
	}{
		{"", "", true},
		{"", "a", false},
		{"*", "", false}, // as Redis: nothing matches an empty string but ""
		{"*", "abc", true},
		{"**", "abc", true},
		{"a*", "a", true},
		{"a*", "ab", true},
		{"a*", "ba", false},
		{"*a", "bba", true},
		{"*a", "ab", false},
		{"a*b", "ab", true},
		{"a*b", "acccb", true},
		{"a*b", "acbd", false},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"*user:*:x", "user:1:x:user:2:x", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"a?c", "abbc", false},
		{"???", "abc", true},
		{"h[ae]llo", "hello", true},
		{"h[ae]llo", "hallo", true},
		{"h[ae]llo", "hillo", false},
		{"h[^e]llo", "hallo", true},
		{"h[^e]llo", "hello", false},
		{"h[a-b]llo", "hbllo", true},
		{"h[a-b]llo", "hcllo", false},
		{"[c-a]", "b", true}, // reversed range
		{"[a-c-e]", "-", true},
		{"[a-]", "_", true}, // '-' then ']' form the range ']'..'a' (Redis quirk)
		{"[a-]", "-", false},
		{"[]", "a", false},
		{"[]a]", "a", false},
		{"[]a]", "a]", false},
		{"[^]", "a", true},
		{"[^]", "ab", false},
		{"[abc", "b", true}, // unterminated: the class ends with the pattern
		{"[abc", "bc", false},
		{"[", "[", false},
		{"[^", "x", true},
		{"[\\]]", "]", true},
		{"[\\]]", "\\", false},
		{"[a\\-z]", "-", true},
		{"[a\\-z]", "b", false},
		{"[\\", "\\", true},
		{"\\*", "*", true},
		{"\\*", "a", false},
		{"\\?", "?", true},
		{"\\[a]", "[a]", true},
		{"a\\", "a\\", true}, // a trailing backslash is literal
		{"\\a", "a", true},
		{"*\\*", "abc*", true},
		{"*\\*", "abc", false},
		{"\x00*\xff", "\x00\x01\xff", true},
		{"[\x80-\xff]", "\x90", true},
		{"user:[0-9]*", "user:42", true},
		{"user:[0-9]*", "user:x42", false},
	}
	for _, c := range cases {
		if got := globMatch([]byte(c.pattern), []byte(c.s)); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
		if got := redisMatch([]byte(c.pattern), []byte(c.s)); got != c.want {
			t.Errorf("reference redisMatch(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

// TestGlobBounded: patterns that make a backtracking matcher exponential
// finish at once.
func TestGlobBounded(t *testing.T) {
	start := time.Now()
	s := []byte(strings.Repeat("a", 4000))
	for _, p := range []string{
		strings.Repeat("a*", 200) + "b",
		strings.Repeat("*a", 200) + "b",
		strings.Repeat("*?", 200) + "[b]",
	} {
		if globMatch([]byte(p), s) {
			t.Fatalf("%q matched", p[:20])
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
}

// redisMatch is a direct, recursive port of Redis's stringmatchlen
// (util.c), the reference for TestGlobDifferential. It is exponential: use it
// on small inputs only.
func redisMatch(p, s []byte) bool {
	for len(p) > 0 && len(s) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for len(s) > 0 {
				if redisMatch(p[1:], s) {
					return true
				}
				s = s[1:]
			}
			return false
		case '?':
			s = s[1:]
		case '[':
			p = p[1:]
			not := len(p) > 0 && p[0] == '^'
			if not {
				p = p[1:]
			}
			match := false
			for {
				if len(p) >= 2 && p[0] == '\\' {
					p = p[1:]
					if p[0] == s[0] {
						match = true
					}
				} else if len(p) > 0 && p[0] == ']' {
					break
				} else if len(p) == 0 {
					p = []byte{0} // Redis steps back onto the last byte
					break
				} else if len(p) >= 3 && p[1] == '-' {
					lo, hi := p[0], p[2]
					if lo > hi {
						lo, hi = hi, lo
					}
					if lo <= s[0] && s[0] <= hi {
						match = true
					}
					p = p[2:]
				} else if p[0] == s[0] {
					match = true
				}
				p = p[1:]
			}
			if not {
				match = !match
			}
			if !match {
				return false
			}
			s = s[1:]
		case '\\':
			if len(p) >= 2 {
				p = p[1:]
			}
			fallthrough
		default:
			if p[0] != s[0] {
				return false
			}
			s = s[1:]
		}
		p = p[1:]
		if len(s) == 0 {
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			break
		}
	}
	return len(p) == 0 && len(s) == 0
}

func TestGlobDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const palpha, salpha = "ab*?[]^-\\", "ab-]^\\*"
	for i := range 200000 {
		p := make([]byte, rng.IntN(9))
		for j := range p {
			p[j] = palpha[rng.IntN(len(palpha))]
		}
		s := make([]byte, 1+rng.IntN(7))
		for j := range s {
			s[j] = salpha[rng.IntN(len(salpha))]
		}
		if got, want := globMatch(p, s), redisMatch(p, s); got != want {
			t.Fatalf("case %d: globMatch(%q, %q) = %v, Redis %v", i, p, s, got, want)
		}
	}
}
