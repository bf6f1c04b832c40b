package script

import (
	"bytes"
	"strconv"
	"testing"
)

// memHost answers GET, SET and TIME over a map, as a command table would.
type memHost struct{ kv map[string]string }

func (h *memHost) Call(args [][]byte, resp int) []byte {
	switch string(bytes.ToLower(args[0])) {
	case "get":
		if v, ok := h.kv[string(args[1])]; ok {
			return appendBulk(nil, v)
		}
		return appendNull(nil, resp)
	case "set":
		h.kv[string(args[1])] = string(args[2])
		return []byte("+OK\r\n")
	case "time":
		return []byte("*2\r\n$10\r\n1893456000\r\n$1\r\n0\r\n")
	}
	return []byte("-ERR Unknown Redis command called from script\r\n")
}

var testTexts = Texts{
	Compile: "ERR Error compiling script (new function): ", Steps: "ERR steps", Memory: "ERR memory",
	Nesting: "ERR reached lua stack limit", NoArgs: "ERR no args", BadArg: "ERR bad arg",
	ReadOnly: "Attempt to modify a readonly table", NoGlobal: "Script attempted to access nonexistent global variable '%s'",
	WrongArgs: "ERR wrong number or type of arguments", BadResp: "ERR RESP version must be 2 or 3.",
	Format: "invalid format (width or precision too long)",
}

// The offsets of gopher-lua's fields the concatenation charge reads were
// found: without them `s = s .. s` would grow until the process dies.
func TestConcatCharged(t *testing.T) {
	if !layout.ok {
		t.Fatal("gopher-lua's LState layout is not the one budget.go reads: concatenations go uncharged")
	}
}

// Every way to exhaust a budget ends in the budget's outcome, the same on
// every run (each case runs three times on fresh and pooled states).
func TestBudgets(t *testing.T) {
	rt := New(Config{MaxSteps: 200000, MaxMemory: 8 << 20}, testTexts)
	for _, tc := range []struct {
		script string
		want   Outcome
	}{
		{"while true do end", OutOfSteps},
		{"local t = {} while true do t[#t+1] = 1 end", OutOfSteps},
		{"local t = {} while true do table.insert(t, 'x') end", OutOfSteps},
		{"local s = 'x' while true do s = s .. s end", OutOfMemory},
		{"local function f() return f() + 1 end return f()", OutOfMemory},
		{"return string.rep('x', 1e9)", OutOfMemory},
		{"local s = string.rep('x', 1e6) return #string.rep(s, 100)", OutOfMemory},
		{"local t = {} for i = 1, 100 do t[i] = string.rep('x', 1e5) end return #table.concat(t)", OutOfMemory},
		{"return #string.gsub(string.rep('x', 1e5), 'x', string.rep('y', 100))", OutOfMemory},
		{"while true do pcall(function() while true do end end) end", OutOfSteps},
		{"return 1", Done},
	} {
		var first []byte
		for i := 0; i < 3; i++ {
			out, o := rt.Run("sha", []byte(tc.script), nil, nil, 2, &memHost{kv: map[string]string{}})
			if o != tc.want {
				t.Errorf("%s: outcome %d (%q), want %d", tc.script, o, out, tc.want)
			}
			if i == 0 {
				first = out
			} else if !bytes.Equal(out, first) {
				t.Errorf("%s: run %d replied %q, the first %q", tc.script, i, out, first)
			}
		}
	}
}

// math.random restarts every run from redisLrand48's initial state: the
// draws of a freshly started redis-server 7.0 (measured).
func TestRandomRestartsEveryRun(t *testing.T) {
	rt := New(Config{}, testTexts)
	for i := 0; i < 3; i++ {
		out, _ := rt.Run("sha", []byte("return {math.random(100), math.random(100), tostring(math.random())}"), nil, nil, 2, &memHost{})
		if want := "*3\r\n:40\r\n:85\r\n$16\r\n0.35333609737146\r\n"; string(out) != want {
			t.Fatalf("run %d: %q, want %q", i, out, want)
		}
	}
}

// A script's reply is always one well-formed RESP reply, whatever the
// script, and no script crashes the runtime.
func FuzzScript(f *testing.F) {
	for _, s := range []string{"return 1", "return {1,{2,{3}},'x',false,{ok='y'},{err='z'}}", "return cjson.decode(ARGV[1])",
		"return redis.call('get', KEYS[1])", "return {map={a={set={b=true}}}, double=1.5}", "error({})", "return tostring(0/0)..1e300",
		"local t = setmetatable({}, {__index=function(t,k) return k end}) return t[1]", "return redis.pcall()",
		"return string.format('%d %s %5.1f', 1, 2, 3)", "return bit.tohex(-1, -8)", "return loadstring(ARGV[1])()"} {
		f.Add(s, "[1,2,{\"a\":null}]", 2)
	}
	rt := New(Config{MaxSteps: 20000, MaxMemory: 1 << 20}, testTexts)
	f.Fuzz(func(t *testing.T, body, arg string, proto int) {
		if proto != 3 {
			proto = 2
		}
		out, _ := rt.Run("sha", []byte(body), [][]byte{[]byte("k")}, [][]byte{[]byte(arg)}, proto, &memHost{kv: map[string]string{"k": arg}})
		if rest, ok := checkReply(out, 0); !ok || len(rest) != 0 {
			t.Fatalf("%q: a malformed reply %q", body, out)
		}
	})
}

// checkReply reads one RESP reply and returns the rest.
func checkReply(b []byte, depth int) ([]byte, bool) {
	end := indexCRLF(b)
	if end < 1 || depth > maxNesting+1 {
		return nil, false
	}
	line, rest := string(b[1:end]), b[end+2:]
	switch b[0] {
	case '+', '-', '_', ',', '(', '#':
		return rest, true
	case ':':
		_, err := strconv.ParseInt(line, 10, 64)
		return rest, err == nil
	case '$':
		n, err := strconv.Atoi(line)
		if err != nil || n < -1 {
			return nil, false
		}
		if n < 0 {
			return rest, true
		}
		if len(rest) < n+2 {
			return nil, false
		}
		return rest[n+2:], rest[n] == '\r' && rest[n+1] == '\n'
	case '*', '%', '~':
		n, err := strconv.Atoi(line)
		if err != nil {
			return nil, false
		}
		if b[0] == '%' {
			n *= 2
		}
		for i := 0; i < n; i++ {
			var ok bool
			if rest, ok = checkReply(rest, depth+1); !ok {
				return nil, false
			}
		}
		return rest, true
	}
	return nil, false
}

// FormatArg and ToString append what fmtNumber formats (%.17g and %.14g,
// glibc's inf and nan), without the string in between.
func TestAppendNumberIsFmtNumber(t *testing.T) {
	inf := 1 / zero
	for _, f := range []float64{0, -zero, 1, -1, 0.1, 1e21, 1e-7, 123456789012345678, 1 / 3.0, 2.5e-310, inf, -inf, zero / zero} {
		if got, want := string(FormatArg([]byte("x"), f)), "x"+fmtNumber(f, 17); got != want {
			t.Errorf("FormatArg(%v) = %q, want %q", f, got, want)
		}
		if got, want := string(ToString(nil, f)), fmtNumber(f, 14); got != want {
			t.Errorf("ToString(%v) = %q, want %q", f, got, want)
		}
	}
}

var zero = 0.0 // a variable: constant division by zero does not compile

// tonumber's trim is C's isspace (" \t\n\v\f\r"), no more: a number with
// any of them around it reads, one with another space or a second sign
// does not.
func TestToNumberTrimsCSpace(t *testing.T) {
	for in, want := range map[string]bool{
		" \t\n\v\f\r12\r\n": true, "+5": true, "-5": true, "--5": false, "+-5": false,
		"\u00a05": false, "5\u00a0": false, "\x005": false, "": false, " ": false,
	} {
		if _, ok := ToNumber([]byte(in)); ok != want {
			t.Errorf("ToNumber(%q) ok = %v, want %v", in, ok, want)
		}
	}
}
