package resp

import (
	"bufio"
	"errors"
	"math/big"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// grammarVector is one line of testdata/grammar.txt.
type grammarVector struct {
	line  int
	kind  string
	input string
	want  string // a number, or "error <substring>"
}

// readGrammarVectors parses testdata/grammar.txt.
func readGrammarVectors(tb testing.TB) []grammarVector {
	tb.Helper()
	fh, err := os.Open("testdata/grammar.txt")
	if err != nil {
		tb.Fatal(err)
	}
	defer fh.Close()
	var out []grammarVector
	sc := bufio.NewScanner(fh)
	for ln := 1; sc.Scan(); ln++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		kind, rest, ok := strings.Cut(text, " ")
		if !ok {
			tb.Fatalf("grammar.txt:%d: no input", ln)
		}
		var input string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				tb.Fatalf("grammar.txt:%d: %v", ln, err)
			}
			input, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			input, rest, _ = strings.Cut(rest, " ")
		}
		want := strings.TrimSpace(rest)
		if want == "" {
			tb.Fatalf("grammar.txt:%d: no expected result", ln)
		}
		out = append(out, grammarVector{ln, kind, input, want})
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// parseByKind runs the parser for kind on the argument named "n".
func parseByKind(tb testing.TB, kind string, b []byte) (int64, error) {
	switch kind {
	case "integer":
		return ParseInteger("n", b)
	case "duration":
		return ParseDuration("n", b)
	case "rate":
		return ParseRate("n", b)
	case "cost":
		return ParseCost("n", b)
	}
	tb.Fatalf("unknown kind %q", kind)
	return 0, nil
}

func TestGrammarVectors(t *testing.T) {
	vs := readGrammarVectors(t)
	if len(vs) < 150 {
		t.Fatalf("only %d vectors", len(vs))
	}
	for _, v := range vs {
		got, err := parseByKind(t, v.kind, []byte(v.input))
		if sub, isErr := strings.CutPrefix(v.want, "error "); isErr {
			if err == nil {
				t.Errorf("grammar.txt:%d: %s %q = %d, want error containing %q", v.line, v.kind, v.input, got, sub)
				continue
			}
			if !strings.Contains(err.Error(), sub) {
				t.Errorf("grammar.txt:%d: %s %q: error %q, want it to contain %q", v.line, v.kind, v.input, err, sub)
			}
			checkArgErrorText(t, err)
			continue
		}
		want, perr := strconv.ParseInt(v.want, 10, 64)
		if perr != nil {
			t.Fatalf("grammar.txt:%d: bad expected value %q", v.line, v.want)
		}
		if err != nil || got != want {
			t.Errorf("grammar.txt:%d: %s %q = %d, %v; want %d", v.line, v.kind, v.input, got, err, want)
		}
	}
}

// checkArgErrorText checks that err is an *ArgError whose text is a safe
// one-line Redis error reply.
func checkArgErrorText(tb testing.TB, err error) {
	tb.Helper()
	var ae *ArgError
	if !errors.As(err, &ae) {
		tb.Fatalf("error %v is a %T, not an *ArgError", err, err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "ERR invalid n '") || strings.ContainsAny(msg, "\r\n") || len(msg) > 400 {
		tb.Fatalf("bad error text %q", msg)
	}
	for i := 0; i < len(msg); i++ {
		if msg[i] < 0x20 || msg[i] > 0x7e {
			tb.Fatalf("non-printable byte in error text %q", msg)
		}
	}
}

// TestNewArgError checks the text of an argument error built outside the
// parsers (the parsers' texts are checked through the commands, in
// testdata/transcripts/bad_input.txt).
func TestNewArgError(t *testing.T) {
	if got, want := NewArgError("limit", []byte("0"), "must be at least 1").Error(), "ERR invalid limit '0': must be at least 1"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestGrammarNoAllocation(t *testing.T) {
	tests := []struct {
		kind, input string
	}{
		{"integer", "9007199254740992"},
		{"duration", "1500ms"},
		{"duration", "366d"},
		{"rate", "7/10s"},
		{"rate", "0.0000001/s"},
		{"rate", "1000000/1000000d"},
	}
	for _, tt := range tests {
		b := []byte(tt.input)
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := parseByKind(t, tt.kind, b); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s %q: %v allocations per call, want 0", tt.kind, tt.input, allocs)
		}
	}
}

// TestGrammarRateOracle compares ParseRate with a big.Rat model on a grid of
// numbers and durations near the limits.
func TestGrammarRateOracle(t *testing.T) {
	nums := []string{"1", "3", "7", "0.5", "0.3", "9.99", "1000000000", "999999999.9", "1000000000.1",
		"0.0000001", "0.00000003", "0.0000000316231", "0.0000000316232", "123456789.123456789",
		"100000000000000000", "0.000000000000000001"}
	durs := []string{"", "/s", "/ms", "/m", "/h", "/d", "/10s", "/500ms", "/366d", "/367d", "/1000000d",
		"/999999999999999999d", "/3", "/999ms", "/31622400001ms"}
	for _, n := range nums {
		for _, d := range durs {
			in := n + d
			got, err := ParseRate("n", []byte(in))
			want, ok := rateOracle(in)
			if ok != (err == nil) || ok && got != want {
				t.Errorf("ParseRate(%q) = %d, %v; oracle %d, %v", in, got, err, want, ok)
			}
		}
	}
}

// rateOracle is an independent model of ParseRate's accepting grammar and
// value, in big rationals.
func rateOracle(s string) (int64, bool) {
	re := regexp.MustCompile(`^(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:/(0|[1-9][0-9]*)?((?i:ms|s|m|h|d))?)?$`)
	m := re.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	slash := strings.Contains(s, "/")
	if slash && m[3] == "" && m[4] == "" {
		return 0, false
	}
	// Significant digits of N, and digits of the duration's number.
	sig := strings.TrimLeft(m[1]+strings.TrimRight(m[2], "0"), "0")
	if len(sig) > 18 || len(m[3]) > 18 {
		return 0, false
	}
	n, _ := new(big.Rat).SetString(m[1] + "." + m[2] + "0")
	d := big.NewInt(1)
	if m[3] != "" {
		d.SetString(m[3], 10)
	}
	units := map[string]int64{"": 1e9, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9, "d": 86400e9}
	d.Mul(d, big.NewInt(units[strings.ToLower(m[4])]))
	if n.Sign() == 0 || d.Sign() == 0 {
		return 0, false
	}
	q := new(big.Rat).Quo(new(big.Rat).SetInt(d), n)
	if q.Cmp(big.NewRat(1, 1)) < 0 || q.Cmp(new(big.Rat).SetInt64(maxDurationNs)) > 0 {
		return 0, false
	}
	return new(big.Int).Quo(q.Num(), q.Denom()).Int64(), true
}

// FuzzGrammar checks that the parsers never panic, that their results are
// in range, that their errors are safe one-line replies, and that ParseRate
// agrees with the big.Rat model.
func FuzzGrammar(f *testing.F) {
	for _, v := range readGrammarVectors(f) {
		f.Add(v.input)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		if v, err := ParseInteger("n", b); err != nil {
			checkArgErrorText(t, err)
		} else if v < 0 || v > maxInteger {
			t.Fatalf("ParseInteger(%q) = %d: out of range", s, v)
		}
		if v, err := ParseDuration("n", b); err != nil {
			checkArgErrorText(t, err)
		} else if v < nsPerMs || v > maxDurationNs {
			t.Fatalf("ParseDuration(%q) = %d: out of range", s, v)
		}
		v, err := ParseRate("n", b)
		if err != nil {
			checkArgErrorText(t, err)
		} else if v < 1 || v > maxDurationNs {
			t.Fatalf("ParseRate(%q) = %d: out of range", s, v)
		}
		if want, ok := rateOracle(s); ok != (err == nil) || ok && v != want {
			t.Fatalf("ParseRate(%q) = %d, %v; oracle %d, %v", s, v, err, want, ok)
		}
		c, err := ParseCost("n", b)
		if err != nil {
			checkArgErrorText(t, err)
		}
		if want, ok := costOracle(s); ok != (err == nil) || ok && c != want {
			t.Fatalf("ParseCost(%q) = %d, %v; oracle %d, %v", s, c, err, want, ok)
		}
	})
}

// costOracle parses a COST by its definition with strconv: an unsigned
// integer without leading zeros from 0 to 2^53, or a minus sign and ASCII
// digits worth 1 to 2^53.
func costOracle(s string) (int64, bool) {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	if digits == s && len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimLeft(digits, "0")+"0", 10, 64)
	if err != nil {
		return 0, false
	}
	v /= 10 // the appended 0 keeps an all-zero string a number
	if v > maxInteger || digits != s && v == 0 {
		return 0, false
	}
	if digits != s {
		return -v, true
	}
	return v, true
}

// TestReasonsQuoteEngineBounds checks that the error texts quote the bounds
// the engine enforces, so that the two cannot drift apart.
func TestReasonsQuoteEngineBounds(t *testing.T) {
	count := strconv.FormatInt(engine.MaxCount, 10)
	days := strconv.Itoa(engine.MaxPeriodDays) + "d"
	for _, tc := range []struct{ reason, want string }{
		{reasonInteger, "to " + count},
		{reasonCost, "from -" + count + " to " + count},
		{reasonDuration, "to " + days},
		{reasonRateSlow, "per " + days},
	} {
		if !strings.Contains(tc.reason, tc.want) {
			t.Errorf("reason %q does not quote %q", tc.reason, tc.want)
		}
	}
	if got, want := int64(maxTimewarpMillis), int64(engine.MaxPeriod/1_000_000); got != want {
		t.Errorf("DEBUG TIMEWARP bound %d ms, want the engine's longest period %d ms", got, want)
	}
}
