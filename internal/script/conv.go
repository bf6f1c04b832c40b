package script

import (
	"math"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// Conversions between Lua values and RESP replies, as Redis 7.0's
// script_lua.c does them (docs "Lua API").

// maxNesting bounds the depth of a reply converted either way (Redis's
// "reached lua stack limit").
const maxNesting = 100

// reply appends lv as a reply in protocol resp (Lua to Redis): a number
// is truncated to an integer, true is 1, false and nil are null, a table
// is an error ({err=}), a status ({ok=}), a RESP3 type ({double=},
// {big_number=}, {map=}, {set=}) or an array up to its first nil. ok is
// false when the value nests too deep.
func (v *vm) reply(b []byte, lv lua.LValue, resp, depth int) ([]byte, bool) {
	if depth > maxNesting {
		return b, false
	}
	switch x := lv.(type) {
	case lua.LString:
		return appendBulk(b, string(x)), true
	case lua.LNumber:
		return appendInt(b, ':', toInteger(float64(x))), true
	case lua.LBool:
		if x {
			return append(b, ":1\r\n"...), true
		}
		return appendNull(b, resp), true
	case *lua.LTable:
		if e, ok := x.RawGetString("err").(lua.LString); ok {
			return errorReply(b, string(e)), true
		}
		if s, ok := x.RawGetString("ok").(lua.LString); ok {
			b = append(b, '+')
			b = append(b, spaces(string(s))...)
			return append(b, '\r', '\n'), true
		}
		if d, ok := x.RawGetString("double").(lua.LNumber); ok {
			if resp == 3 {
				b = append(b, ',')
				b = append(b, fmtDouble(float64(d))...)
				return append(b, '\r', '\n'), true
			}
			return appendBulk(b, fmtDouble(float64(d))), true
		}
		if n, ok := x.RawGetString("big_number").(lua.LString); ok {
			if resp == 3 {
				b = append(b, '(')
				b = append(b, spaces(string(n))...)
				return append(b, '\r', '\n'), true
			}
			return appendBulk(b, string(n)), true
		}
		if m, ok := x.RawGetString("map").(*lua.LTable); ok {
			var pairs []lua.LValue
			for k, val := m.Next(lua.LNil); k != lua.LNil; k, val = m.Next(k) {
				pairs = append(pairs, k, val)
			}
			return v.aggregate(b, '%', len(pairs)/2, pairs, resp, depth)
		}
		if s, ok := x.RawGetString("set").(*lua.LTable); ok {
			var members []lua.LValue
			for k, _ := s.Next(lua.LNil); k != lua.LNil; k, _ = s.Next(k) {
				members = append(members, k)
			}
			return v.aggregate(b, '~', len(members), members, resp, depth)
		}
		n := 0
		for x.RawGetInt(n+1) != lua.LNil {
			n++
		}
		b = appendInt(b, '*', int64(n))
		for i := 1; i <= n; i++ {
			var ok bool
			if b, ok = v.reply(b, x.RawGetInt(i), resp, depth+1); !ok {
				return b, false
			}
		}
		return b, true
	}
	return appendNull(b, resp), true
}

// aggregate appends a RESP3 map ('%' and n pairs) or set ('~' and n
// members) holding elems, or under RESP2 an array of every element.
func (v *vm) aggregate(b []byte, typ byte, n int, elems []lua.LValue, resp, depth int) ([]byte, bool) {
	if resp == 3 {
		b = appendInt(b, typ, int64(n))
	} else {
		b = appendInt(b, '*', int64(len(elems)))
	}
	for _, e := range elems {
		var ok bool
		if b, ok = v.reply(b, e, resp, depth+1); !ok {
			return b, false
		}
	}
	return b, true
}

// toInteger truncates f as Redis's (long long) cast does on x86: NaN and
// values out of range give the smallest integer.
func toInteger(f float64) int64 {
	if math.IsNaN(f) || f >= 9223372036854775808.0 || f < -9223372036854775808.0 {
		return math.MinInt64
	}
	return int64(f)
}

func appendNull(b []byte, resp int) []byte {
	if resp == 3 {
		return append(b, "_\r\n"...)
	}
	return append(b, "$-1\r\n"...)
}

func appendInt(b []byte, prefix byte, n int64) []byte {
	b = append(b, prefix)
	b = strconv.AppendInt(b, n, 10)
	return append(b, '\r', '\n')
}

func appendBulk(b []byte, s string) []byte {
	b = appendInt(b, '$', int64(len(s)))
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// spaces replaces line breaks by spaces (a status or error line).
func spaces(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}

// fmtNumber formats f as C's printf %.<prec>g does, with inf and nan
// spelled as glibc spells them.
func fmtNumber(f float64, prec int) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "-nan" // as x86 computes 0/0 and glibc prints it
	}
	return strconv.FormatFloat(f, 'g', prec, 64)
}

// fmtDouble formats a RESP3 double as Redis does (%.17g, inf, -inf, nan).
func fmtDouble(f float64) string {
	if math.IsNaN(f) {
		return "nan"
	}
	return fmtNumber(f, 17)
}

// parseReply reads one RESP reply from b into a Lua value (Redis to Lua)
// and returns the rest of b: an integer is a number, a bulk a string, a
// nil bulk or array false (nil in RESP3), an array a table, a status
// {ok=}, an error {err=} (its code split off as Redis's luaPushErrorBuff
// does), and the RESP3 types {map=}, {set=}, {double=}, {big_number=},
// {verbatim_string=}, booleans and nil.
func (v *vm) parseReply(b []byte, depth int) (lua.LValue, []byte, bool) {
	if len(b) < 3 || depth > maxNesting {
		return lua.LNil, nil, false
	}
	end := indexCRLF(b)
	if end < 0 {
		return lua.LNil, nil, false
	}
	lineB, rest := b[1:end], b[end+2:]
	var line string
	switch b[0] {
	case '+', '-', ',', '(', '#':
		line = string(lineB)
	}
	L := v.L
	switch b[0] {
	case '+':
		t := L.CreateTable(0, 1)
		t.RawSetString("ok", lua.LString(line))
		return t, rest, true
	case '-':
		return errorTable(L, line), rest, true
	case ':':
		n, err := parseIntB(lineB)
		return lua.LNumber(n), rest, err == nil
	case '$', '=':
		n, err := atoiB(lineB)
		if err != nil {
			return lua.LNil, nil, false
		}
		if n < 0 {
			return lua.LFalse, rest, true
		}
		if len(rest) < n+2 {
			return lua.LNil, nil, false
		}
		s := string(rest[:n])
		rest = rest[n+2:]
		if b[0] == '=' {
			t, vt := L.CreateTable(0, 1), L.CreateTable(0, 1)
			if len(s) >= 4 {
				vt.RawSetString("format", lua.LString(s[:3]))
				s = s[4:]
			}
			vt.RawSetString("string", lua.LString(s))
			t.RawSetString("verbatim_string", vt)
			return t, rest, true
		}
		return lua.LString(s), rest, true
	case '*', '~', '%':
		n, err := atoiB(lineB)
		if err != nil {
			return lua.LNil, nil, false
		}
		if n < 0 {
			return lua.LFalse, rest, true
		}
		items := n
		if b[0] == '%' {
			items = 2 * n
		}
		vals := make([]lua.LValue, 0, min(items, 1024))
		for i := 0; i < items; i++ {
			var e lua.LValue
			var ok bool
			if e, rest, ok = v.parseReply(rest, depth+1); !ok {
				return lua.LNil, nil, false
			}
			vals = append(vals, e)
		}
		switch b[0] {
		case '%':
			m := L.CreateTable(0, 1)
			for i := 0; i+1 < len(vals); i += 2 {
				if vals[i] != lua.LNil {
					m.RawSet(vals[i], vals[i+1])
				}
			}
			t := L.CreateTable(0, 1)
			t.RawSetString("map", m)
			return t, rest, true
		case '~':
			s := L.CreateTable(0, 1)
			for _, e := range vals {
				if e != lua.LNil {
					s.RawSet(e, lua.LTrue)
				}
			}
			t := L.CreateTable(0, 1)
			t.RawSetString("set", s)
			return t, rest, true
		}
		t := L.CreateTable(len(vals), 0)
		for i, e := range vals {
			t.RawSetInt(i+1, e)
		}
		return t, rest, true
	case '_':
		return lua.LNil, rest, true
	case '#':
		return lua.LBool(line == "t"), rest, true
	case ',':
		f, err := strconv.ParseFloat(line, 64)
		if err != nil {
			return lua.LNil, nil, false
		}
		t := L.CreateTable(0, 1)
		t.RawSetString("double", lua.LNumber(f))
		return t, rest, true
	case '(':
		t := L.CreateTable(0, 1)
		t.RawSetString("big_number", lua.LString(line))
		return t, rest, true
	}
	return lua.LNil, nil, false
}

// plainInt reads an optional minus and up to 18 digits.
func plainInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// atoiB is strconv.Atoi of b, without a string when b is plain.
func atoiB(b []byte) (int, error) {
	if n, ok := plainInt(b); ok {
		return int(n), nil
	}
	return strconv.Atoi(string(b))
}

// parseIntB is strconv.ParseInt(b, 10, 64) likewise.
func parseIntB(b []byte) (int64, error) {
	if n, ok := plainInt(b); ok {
		return n, nil
	}
	return strconv.ParseInt(string(b), 10, 64)
}

// errorTable is Redis's error table for an error reply line (without
// its '-'): {err="CODE msg"}, the code ERR when the line has none.
func errorTable(L *lua.LState, line string) *lua.LTable {
	t := L.CreateTable(0, 1)
	t.RawSetString("err", lua.LString(errorText("-"+line)))
	return t
}

// errorText is luaPushErrorBuff's text: "-CODE msg" keeps its code, a
// text without '-' or without a space gets ERR; trailing line breaks go.
func errorText(s string) string {
	code, msg := "ERR", s
	if strings.HasPrefix(s, "-") {
		if i := strings.IndexByte(s, ' '); i >= 0 {
			code, msg = s[1:i], s[i+1:]
		} else {
			msg = s[1:]
		}
	}
	return code + " " + strings.TrimRight(msg, "\r\n")
}

func indexCRLF(b []byte) int {
	for i := 0; i+1 < len(b); i++ {
		if b[i] == '\r' && b[i+1] == '\n' {
			return i
		}
	}
	return -1
}

// The number semantics of the scripts, for the scripts run natively
// (resp): what tonumber makes of a string, how a number passed to
// redis.call is formatted (precision 17, as Redis 7.0), and how a number
// in a reply is truncated to an integer.

// ToNumber is tonumber(s) (base 10); ok is false where tonumber gives nil.
func ToNumber(s []byte) (float64, bool) { return strToNumber(string(s)) }

// trimCSpace is strings.Trim(s, " \t\n\v\f\r"), C's isspace, without
// building the cutset's table on every call (strToNumber runs for every
// number a script reads).
func trimCSpace(s string) string {
	for len(s) > 0 && isCSpace(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isCSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

func isCSpace(c byte) bool { return c == ' ' || '\t' <= c && c <= '\r' }

func isSign(r rune) bool { return r == '+' || r == '-' }

// FormatArg appends f as redis.call passes a number (%.17g).
func FormatArg(b []byte, f float64) []byte { return appendNumber(b, f, 17) }

// ToInteger is a number's integer in a script's reply.
func ToInteger(f float64) int64 { return toInteger(f) }

// ToString appends tostring(f) (%.14g).
func ToString(b []byte, f float64) []byte { return appendNumber(b, f, 14) }

// appendNumber appends fmtNumber(f, prec) without making a string of it
// (the native scripts format numbers on every run).
func appendNumber(b []byte, f float64, prec int) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return append(b, fmtNumber(f, prec)...)
	}
	return strconv.AppendFloat(b, f, 'g', prec, 64)
}
