package script

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	lua "github.com/yuin/gopher-lua"
)

// cjson and bit, as Redis's lua-cjson and LuaBitOp behave for the values
// scripts send: cjson.encode, cjson.decode, cjson.null; bit's functions
// on 32-bit integers.

const maxJSONDepth = 1000

func (v *vm) cjsonLib() *lua.LTable {
	L := v.L
	t := L.NewTable()
	v.null = L.NewUserData()
	t.RawSetString("null", v.null)
	t.RawSetString("encode", L.NewFunction(func(L *lua.LState) int {
		if L.GetTop() != 1 {
			L.ArgError(1, "expected 1 argument")
		}
		var b []byte
		b = v.encodeJSON(L, b, L.Get(1), 0)
		L.Push(lua.LString(b))
		return 1
	}))
	t.RawSetString("decode", L.NewFunction(func(L *lua.LState) int {
		s := L.CheckString(1)
		d := jsonDecoder{v: v, s: s}
		d.space()
		val := d.value(0)
		d.space()
		if d.err == "" && d.i < len(s) {
			d.fail("the end")
		}
		if d.err != "" {
			L.RaiseError("%s", d.err)
		}
		L.Push(val)
		return 1
	}))
	return t
}

func (v *vm) encodeJSON(L *lua.LState, b []byte, lv lua.LValue, depth int) []byte {
	if depth > maxJSONDepth {
		L.RaiseError("Cannot serialise, excessive nesting (%d)", depth)
	}
	if len(b) > 1<<20 && !v.charge(int64(len(b)), 1) {
		return b
	}
	switch x := lv.(type) {
	case lua.LString:
		return appendJSONString(b, string(x))
	case lua.LNumber:
		f := float64(x)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			L.RaiseError("Cannot serialise number: must not be NaN or Inf")
		}
		return append(b, fmtNumber(f, 14)...)
	case lua.LBool:
		if x {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case *lua.LNilType:
		return append(b, "null"...)
	case *lua.LUserData:
		if x == v.null {
			return append(b, "null"...)
		}
	case *lua.LTable:
		// An array when every key is a positive integer, as lua-cjson
		// decides (without its sparse-array checks).
		n, isArray := 0, true
		for k, _ := x.Next(lua.LNil); k != lua.LNil; k, _ = x.Next(k) {
			num, ok := k.(lua.LNumber)
			if !ok || float64(num) != math.Floor(float64(num)) || num < 1 {
				isArray = false
				break
			}
			n = max(n, int(num))
		}
		if isArray && n > 0 {
			b = append(b, '[')
			for i := 1; i <= n; i++ {
				if i > 1 {
					b = append(b, ',')
				}
				b = v.encodeJSON(L, b, x.RawGetInt(i), depth+1)
			}
			return append(b, ']')
		}
		b = append(b, '{')
		first := true
		for k, val := x.Next(lua.LNil); k != lua.LNil; k, val = x.Next(k) {
			if !first {
				b = append(b, ',')
			}
			first = false
			switch kk := k.(type) {
			case lua.LString:
				b = appendJSONString(b, string(kk))
			case lua.LNumber:
				b = appendJSONString(b, fmtNumber(float64(kk), 14))
			default:
				L.RaiseError("Cannot serialise %s: table key must be a number or string", k.Type().String())
			}
			b = append(b, ':')
			b = v.encodeJSON(L, b, val, depth+1)
		}
		return append(b, '}')
	}
	L.RaiseError("Cannot serialise %s: type not supported", lv.Type().String())
	return b
}

// appendJSONString escapes as lua-cjson does (it escapes '/').
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '/':
			b = append(b, '\\', '/')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		default:
			if c < 0x20 || c == 0x7f {
				b = append(b, `\u00`...)
				b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
			} else {
				b = append(b, c)
			}
		}
	}
	return append(b, '"')
}

// jsonDecoder parses JSON into Lua values, keeping the order of object
// keys (tables are filled in document order).
type jsonDecoder struct {
	v   *vm
	s   string
	i   int
	err string
}

func (d *jsonDecoder) fail(what string) {
	if d.err == "" {
		d.err = "Expected " + what + " but found invalid token at character " + strconv.Itoa(d.i+1)
	}
}

func (d *jsonDecoder) space() {
	for d.i < len(d.s) && strings.IndexByte(" \t\r\n", d.s[d.i]) >= 0 {
		d.i++
	}
}

// skip passes the byte c when it comes next.
func (d *jsonDecoder) skip(c byte) bool {
	if d.i < len(d.s) && d.s[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *jsonDecoder) value(depth int) lua.LValue {
	L := d.v.L
	if depth > maxJSONDepth {
		d.err = "Found too many nested data structures (" + strconv.Itoa(depth) + ") at character " + strconv.Itoa(d.i+1)
		return lua.LNil
	}
	if d.err != "" || d.i >= len(d.s) {
		d.fail("value")
		return lua.LNil
	}
	switch c := d.s[d.i]; {
	case c == '{':
		d.i++
		t := L.NewTable()
		d.space()
		if d.skip('}') {
			return t
		}
		for d.err == "" {
			d.space()
			if d.i >= len(d.s) || d.s[d.i] != '"' {
				d.fail("object key string")
				return lua.LNil
			}
			k := d.str()
			d.space()
			if !d.skip(':') {
				d.fail("colon")
				return lua.LNil
			}
			d.space()
			t.RawSetString(k, d.value(depth+1))
			d.space()
			if d.skip(',') {
				continue
			}
			if d.skip('}') {
				return t
			}
			d.fail("comma or object end")
		}
		return lua.LNil
	case c == '[':
		d.i++
		t := L.NewTable()
		d.space()
		if d.skip(']') {
			return t
		}
		for n := 1; d.err == ""; n++ {
			d.space()
			t.RawSetInt(n, d.value(depth+1))
			d.space()
			if d.skip(',') {
				continue
			}
			if d.skip(']') {
				return t
			}
			d.fail("comma or array end")
		}
		return lua.LNil
	case c == '"':
		return lua.LString(d.str())
	case strings.HasPrefix(d.s[d.i:], "true"):
		d.i += 4
		return lua.LTrue
	case strings.HasPrefix(d.s[d.i:], "false"):
		d.i += 5
		return lua.LFalse
	case strings.HasPrefix(d.s[d.i:], "null"):
		d.i += 4
		return d.v.null
	case c == '-' || c >= '0' && c <= '9':
		j := d.i
		for j < len(d.s) && strings.IndexByte("+-0123456789.eE", d.s[j]) >= 0 {
			j++
		}
		f, err := strconv.ParseFloat(d.s[d.i:j], 64)
		if err != nil {
			d.fail("value")
			return lua.LNil
		}
		d.i = j
		return lua.LNumber(f)
	}
	d.fail("value")
	return lua.LNil
}

func (d *jsonDecoder) str() string {
	d.i++ // the quote
	var b strings.Builder
	for d.i < len(d.s) {
		c := d.s[d.i]
		switch {
		case c == '"':
			d.i++
			return b.String()
		case c == '\\' && d.i+1 < len(d.s):
			d.i += 2
			switch e := d.s[d.i-1]; e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'u':
				if d.i+4 > len(d.s) {
					d.fail("unicode escape")
					return ""
				}
				n, err := strconv.ParseUint(d.s[d.i:d.i+4], 16, 32)
				if err != nil {
					d.fail("unicode escape")
					return ""
				}
				d.i += 4
				r := rune(n)
				if r >= 0xD800 && r < 0xDC00 && d.i+6 <= len(d.s) && d.s[d.i] == '\\' && d.s[d.i+1] == 'u' {
					if lo, err := strconv.ParseUint(d.s[d.i+2:d.i+6], 16, 32); err == nil && lo >= 0xDC00 && lo < 0xE000 {
						r = (r-0xD800)<<10 | (rune(lo) - 0xDC00) + 0x10000
						d.i += 6
					}
				}
				var buf [4]byte
				b.Write(buf[:utf8.EncodeRune(buf[:], r)])
			default:
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
			d.i++
		}
	}
	d.fail("string end")
	return ""
}

func (v *vm) bitLib() *lua.LTable {
	L := v.L
	t := L.NewTable()
	tobit := func(L *lua.LState, i int) int32 {
		f := float64(L.CheckNumber(i))
		// LuaBitOp: add 2^52+2^51 and keep the low 32 bits.
		return int32(uint32(uint64(int64(math.Mod(math.Trunc(f), 4294967296)))))
	}
	fold := func(op func(a, b int32) int32) lua.LGFunction {
		return func(L *lua.LState) int {
			r := tobit(L, 1)
			for i := 2; i <= L.GetTop(); i++ {
				r = op(r, tobit(L, i))
			}
			L.Push(lua.LNumber(r))
			return 1
		}
	}
	shift := func(op func(a int32, n uint) int32) lua.LGFunction {
		return func(L *lua.LState) int {
			L.Push(lua.LNumber(op(tobit(L, 1), uint(tobit(L, 2))&31)))
			return 1
		}
	}
	fns := map[string]lua.LGFunction{
		"tobit": func(L *lua.LState) int { L.Push(lua.LNumber(tobit(L, 1))); return 1 },
		"bnot":  func(L *lua.LState) int { L.Push(lua.LNumber(^tobit(L, 1))); return 1 },
		"band":  fold(func(a, b int32) int32 { return a & b }),
		"bor":   fold(func(a, b int32) int32 { return a | b }),
		"bxor":  fold(func(a, b int32) int32 { return a ^ b }),
		"lshift": shift(func(a int32, n uint) int32 {
			return int32(uint32(a) << n)
		}),
		"rshift": shift(func(a int32, n uint) int32 {
			return int32(uint32(a) >> n)
		}),
		"arshift": shift(func(a int32, n uint) int32 { return a >> n }),
		"rol": shift(func(a int32, n uint) int32 {
			return int32(uint32(a)<<n | uint32(a)>>(32-n))
		}),
		"ror": shift(func(a int32, n uint) int32 {
			return int32(uint32(a)>>n | uint32(a)<<(32-n))
		}),
		"bswap": func(L *lua.LState) int {
			x := uint32(tobit(L, 1))
			L.Push(lua.LNumber(int32(x>>24 | x>>8&0xff00 | x<<8&0xff0000 | x<<24)))
			return 1
		},
		"tohex": func(L *lua.LState) int {
			x := uint32(tobit(L, 1))
			n := 8
			if L.GetTop() >= 2 {
				n = int(tobit(L, 2))
			}
			digits := "0123456789abcdef"
			if n < 0 {
				n, digits = -n, "0123456789ABCDEF"
			}
			n = min(n, 8)
			buf := make([]byte, n)
			for i := n - 1; i >= 0; i-- {
				buf[i] = digits[x&15]
				x >>= 4
			}
			L.Push(lua.LString(buf))
			return 1
		},
	}
	names := []string{"tobit", "bnot", "band", "bor", "bxor", "lshift", "rshift", "arshift", "rol", "ror", "bswap", "tohex"}
	for _, name := range names {
		t.RawSetString(name, L.NewFunction(fns[name]))
	}
	return t
}
