package script

import (
	"math"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// The sandbox: the libraries Redis 7.0 loads, as it loads them. The base
// library without dofile, loadfile, print, getfenv, setfenv, newproxy,
// module and require (Redis removes them); table, string, math; cjson and
// bit (cjson.go, as lua-cjson and LuaBitOp behave); redis (redislib.go).
// No os, io, debug, coroutine. Every global and library table is
// read-only, as Redis 7.0 makes them: the scripts' environment is an
// empty table whose metatable reads the real globals and refuses writes,
// and reading a global that does not exist is an error.

// rand48Init is redisLrand48's state before any seed (rand.c's X0..X2),
// which Redis starts from: a script's math.random gives what the first
// script after a redis-server start gets.
const rand48Init = 0x1234ABCD330E

func newVM(rt *Runtime) *vm {
	L := lua.NewState(lua.Options{
		SkipOpenLibs:        true,
		CallStackSize:       maxCallDepth,
		RegistrySize:        1024,
		RegistryMaxSize:     maxRegistry,
		IncludeGoStackTrace: false,
	})
	v := &vm{rt: rt, L: L, readonly: make(map[*lua.LTable]bool)}
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.fn))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	g := L.G.Global
	v.g = g
	for _, name := range []string{"dofile", "loadfile", "print", "getfenv", "setfenv", "newproxy", "module", "require", "_printregs", "_GOPHER_LUA_VERSION"} {
		g.RawSetString(name, lua.LNil)
	}
	v.overrideBase(g)
	v.boundResults(g)
	v.overrideString(g.RawGetString("string").(*lua.LTable))
	v.overrideTable(g.RawGetString("table").(*lua.LTable))
	v.overrideMath(g.RawGetString("math").(*lua.LTable))
	g.RawSetString("cjson", v.cjsonLib())
	g.RawSetString("bit", v.bitLib())
	g.RawSetString("redis", v.redisLib())
	// The library tables become read-only views of themselves.
	for _, name := range []string{"string", "table", "math", "cjson", "bit", "redis"} {
		g.RawSetString(name, v.readOnly(g.RawGetString(name).(*lua.LTable), nil))
	}
	// The string metatable's __index is the string library's view.
	if mt, ok := L.GetMetatable(lua.LString("")).(*lua.LTable); ok {
		mt.RawSetString("__index", g.RawGetString("string"))
	}
	v.env = v.readOnly(g, L.NewFunction(v.noGlobal))
	g.RawSetString("_G", v.env)
	return v
}

// readOnly returns an empty table reading t and refusing writes; a read
// of a missing key calls missing when set.
func (v *vm) readOnly(t *lua.LTable, missing *lua.LFunction) *lua.LTable {
	L := v.L
	if missing != nil {
		gm := L.NewTable()
		gm.RawSetString("__index", missing)
		L.SetMetatable(t, gm)
	}
	view := L.NewTable()
	mt := L.NewTable()
	mt.RawSetString("__index", t)
	mt.RawSetString("__newindex", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("%s", v.rt.texts.ReadOnly)
		return 0
	}))
	mt.RawSetString("__metatable", lua.LFalse)
	L.SetMetatable(view, mt)
	v.readonly[view] = true
	return view
}

func (v *vm) noGlobal(L *lua.LState) int {
	L.RaiseError(v.rt.texts.NoGlobal, L.ToString(2))
	return 0
}

// wrap replaces the function name of table t by f, which gets the
// function it replaces to call.
func (v *vm) wrap(t *lua.LTable, name string, f func(L *lua.LState, orig *lua.LFunction) int) {
	orig := t.RawGetString(name).(*lua.LFunction)
	t.RawSetString(name, v.L.NewFunction(func(L *lua.LState) int { return f(L, orig) }))
}

// overrideBase replaces the base functions whose gopher-lua behaviour a
// script can tell from C Lua's.
func (v *vm) overrideBase(g *lua.LTable) {
	L := v.L
	// rawset and setmetatable refuse a read-only table.
	for _, name := range []string{"rawset", "setmetatable"} {
		v.wrap(g, name, func(L *lua.LState, orig *lua.LFunction) int {
			if t, ok := L.Get(1).(*lua.LTable); ok && v.readonly[t] {
				L.Error(lua.LString(v.rt.texts.ReadOnly), 0)
			}
			return orig.GFunction(L)
		})
	}
	// collectgarbage runs a full Go GC in gopher-lua: answer without.
	g.RawSetString("collectgarbage", L.NewFunction(func(L *lua.LState) int {
		L.Push(lua.LNumber(0))
		return 1
	}))
	g.RawSetString("gcinfo", L.NewFunction(func(L *lua.LState) int {
		L.Push(lua.LNumber(0))
		return 1
	}))
	v.wrap(g, "tostring", func(L *lua.LState, tostr *lua.LFunction) int {
		if n, ok := L.Get(1).(lua.LNumber); ok {
			L.Push(lua.LString(fmtNumber(float64(n), 14)))
			return 1
		}
		if t, ok := L.Get(1).(*lua.LTable); ok && L.GetMetaField(t, "__tostring") == lua.LNil {
			L.Push(lua.LString("table")) // never an address: replicas must agree
			return 1
		}
		if _, ok := L.Get(1).(*lua.LFunction); ok {
			L.Push(lua.LString("function"))
			return 1
		}
		return tostr.GFunction(L)
	})
	v.wrap(g, "tonumber", func(L *lua.LState, tonum *lua.LFunction) int {
		if L.GetTop() >= 2 && L.Get(2) != lua.LNil {
			if b, ok := L.Get(2).(lua.LNumber); !ok || b != 10 {
				return tonum.GFunction(L)
			}
		}
		switch x := L.Get(1).(type) {
		case lua.LNumber:
			L.Push(x)
		case lua.LString:
			if f, ok := strToNumber(string(x)); ok {
				L.Push(lua.LNumber(f))
			} else {
				L.Push(lua.LNil)
			}
		default:
			L.CheckAny(1)
			L.Push(lua.LNil)
		}
		return 1
	})
	// load and loadstring: the chunk runs in the scripts' environment.
	for _, name := range []string{"load", "loadstring"} {
		v.wrap(g, name, func(L *lua.LState, orig *lua.LFunction) int {
			// Compiling is work out of the VM: a step per source byte.
			if src, ok := L.Get(1).(lua.LString); ok && !v.b.chargeSteps(float64(len(src))) {
				L.RaiseError("%s", v.rt.texts.Steps)
			}
			n := orig.GFunction(L)
			if fn, ok := L.Get(-n).(*lua.LFunction); ok && n > 0 {
				fn.Env = v.env
			}
			return n
		})
	}
}

// boundResults refuses, as C Lua does, to push more than maxResults
// values from unpack and string.byte.
func (v *vm) boundResults(g *lua.LTable) {
	v.wrap(g, "unpack", func(L *lua.LState, unpack *lua.LFunction) int {
		t := L.CheckTable(1)
		i := L.OptInt64(2, 1)
		j := L.OptInt64(3, int64(t.Len()))
		if i <= j && j-i >= maxResults-1 {
			L.RaiseError("too many results to unpack")
		}
		return unpack.GFunction(L)
	})
	str := g.RawGetString("string").(*lua.LTable)
	v.wrap(str, "byte", func(L *lua.LState, byteFn *lua.LFunction) int {
		s := L.CheckString(1)
		i, j := L.OptInt64(2, 1), int64(0)
		if L.GetTop() >= 3 {
			j = L.CheckInt64(3)
		} else {
			j = i
		}
		n := int64(len(s))
		if i < 0 {
			i += n + 1
		}
		if j < 0 {
			j += n + 1
		}
		i, j = max(i, 1), min(j, n)
		if i <= j && j-i >= maxResults-1 {
			L.RaiseError("stack overflow (string slice too long)")
		}
		return byteFn.GFunction(L)
	})
}

// strToNumber is C Lua 5.1's luaO_str2d over glibc's strtod: surrounding
// space, decimal and hex integers, exponents, inf and nan.
func strToNumber(s string) (float64, bool) {
	s = trimCSpace(s)
	if s == "" {
		return 0, false
	}
	body := strings.TrimLeftFunc(s, isSign)
	if len(s)-len(body) > 1 {
		return 0, false
	}
	if len(body) > 2 && body[0] == '0' && (body[1] == 'x' || body[1] == 'X') {
		n, err := strconv.ParseUint(body[2:], 16, 64)
		if err != nil {
			return 0, false
		}
		f := float64(n)
		if s[0] == '-' {
			f = -f
		}
		return f, true
	}
	for _, c := range body {
		if c == '_' {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return f, true
		}
		return 0, false
	}
	return f, true
}

// overrideString bounds the functions that create large strings, and
// string.format's widths as C Lua does.
func (v *vm) overrideString(t *lua.LTable) {
	v.wrap(t, "rep", func(L *lua.LState, rep *lua.LFunction) int {
		s := L.CheckString(1)
		n := L.CheckInt64(2)
		if n > 0 && !v.charge(int64(len(s))*n, n) {
			return 0
		}
		return rep.GFunction(L)
	})
	v.wrap(t, "format", func(L *lua.LState, format *lua.LFunction) int {
		f := L.CheckString(1)
		if !checkFormat(f) {
			L.RaiseError("%s", v.rt.texts.Format)
		}
		// Numbers given to %s print as C Lua's tostring does.
		for i := 2; i <= L.GetTop(); i++ {
			if n, ok := L.Get(i).(lua.LNumber); ok && formatVerb(f, i-1) == 's' {
				L.Replace(i, lua.LString(fmtNumber(float64(n), 14)))
			}
		}
		var in int64
		for i := 1; i <= L.GetTop(); i++ {
			if s, ok := L.Get(i).(lua.LString); ok {
				in += int64(len(s))
			}
		}
		if !v.charge(in+int64(L.GetTop())*100, 1) {
			return 0
		}
		return format.GFunction(L)
	})
	// Pattern matching backtracks inside one builtin call, out of the
	// VM's instruction count: charge each call its worst case first.
	for _, name := range []string{"find", "match", "gmatch"} {
		v.wrap(t, name, func(L *lua.LState, orig *lua.LFunction) int {
			v.chargePattern(L.CheckString(1), L.CheckString(2))
			return orig.GFunction(L)
		})
	}
	v.wrap(t, "gsub", func(L *lua.LState, gsub *lua.LFunction) int {
		s := L.CheckString(1)
		v.chargePattern(s, L.CheckString(2))
		worst := int64(len(s))
		if r, ok := L.Get(3).(lua.LString); ok {
			worst += (int64(len(s)) + 1) * int64(len(r))
		}
		if !v.charge(worst, 1) {
			return 0
		}
		return gsub.GFunction(L)
	})
}

// chargePattern charges a match of pattern over s its worst case against
// the step budget: Lua patterns backtrack, each quantifier (*, +, -) over
// up to len(s) positions, from every start position unless anchored. A
// step is a VM instruction, about 100 pattern steps. Plain find
// (string.find's fourth argument) is charged the same: a bound, not an
// estimate.
func (v *vm) chargePattern(s, pattern string) {
	n := float64(len(s) + 1)
	cost := n
	if strings.HasPrefix(pattern, "^") {
		cost = 1
	}
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '%':
			i++ // an escape: the next byte is literal or a class
		case '*', '+', '-':
			cost *= n
		}
		if cost > 1e18 {
			break
		}
	}
	if !v.b.chargeSteps(cost / 100) {
		v.L.RaiseError("%s", v.rt.texts.Steps)
	}
}

// checkFormat reports whether every conversion of f has a width and a
// precision of at most two digits (C Lua's "invalid format").
func checkFormat(f string) bool {
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		i++
		if i < len(f) && f[i] == '%' {
			continue
		}
		for i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0 {
			i++
		}
		var d int
		if i, d = skipDigits(f, i); d > 2 {
			return false
		}
		if i < len(f) && f[i] == '.' {
			if i, d = skipDigits(f, i+1); d > 2 {
				return false
			}
		}
	}
	return true
}

// skipDigits returns the index past the digits that start at f[i] and how
// many there are.
func skipDigits(f string, i int) (int, int) {
	j := i
	for j < len(f) && f[j] >= '0' && f[j] <= '9' {
		j++
	}
	return j, j - i
}

// formatVerb returns the verb of f's n-th conversion (1-based), or 0.
func formatVerb(f string, n int) byte {
	k := 0
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		i++
		if i < len(f) && f[i] == '%' {
			continue
		}
		for i < len(f) && strings.IndexByte("-+ #0123456789.", f[i]) >= 0 {
			i++
		}
		if k++; k == n && i < len(f) {
			return f[i]
		}
	}
	return 0
}

// charge counts n created bytes against the run's memory budget (count
// items at least a byte each), raising the budget error when spent.
func (v *vm) charge(n, count int64) bool {
	if n < 0 || count < 0 || n < count || !v.b.charge(max(n, count)) {
		v.b.memoryOut = true
		v.L.RaiseError("%s", v.rt.texts.Memory)
		return false
	}
	return true
}

func (v *vm) overrideTable(t *lua.LTable) {
	v.wrap(t, "concat", func(L *lua.LState, concat *lua.LFunction) int {
		tb := L.CheckTable(1)
		sep := int64(len(L.OptString(2, "")))
		var n int64
		for i := 1; ; i++ {
			e := tb.RawGetInt(i)
			if e == lua.LNil {
				break
			}
			if s, ok := e.(lua.LString); ok {
				n += int64(len(s))
			} else {
				n += 24
			}
			n += sep
		}
		if !v.charge(n, 1) {
			return 0
		}
		return concat.GFunction(L)
	})
	v.wrap(t, "insert", func(L *lua.LState, insert *lua.LFunction) int {
		if !v.charge(16, 1) {
			return 0
		}
		return insert.GFunction(L)
	})
}

// overrideMath: math.huge is infinity, and math.random is Redis's
// redisLrand48, restarted from the same state for every run.
func (v *vm) overrideMath(t *lua.LTable) {
	L := v.L
	t.RawSetString("huge", lua.LNumber(math.Inf(1)))
	t.RawSetString("random", L.NewFunction(func(L *lua.LState) int {
		v.rng = (0x5DEECE66D*v.rng + 0xB) & (1<<48 - 1)
		r := float64(int32(v.rng>>17)%math.MaxInt32) / float64(math.MaxInt32)
		switch L.GetTop() {
		case 0:
			L.Push(lua.LNumber(r))
		case 1:
			u := L.CheckInt(1)
			if u < 1 {
				L.ArgError(1, "interval is empty")
			}
			L.Push(lua.LNumber(math.Floor(r*float64(u)) + 1))
		case 2:
			l, u := L.CheckInt(1), L.CheckInt(2)
			if l > u {
				L.ArgError(2, "interval is empty")
			}
			L.Push(lua.LNumber(math.Floor(r*float64(u-l+1)) + float64(l)))
		default:
			L.RaiseError("wrong number of arguments")
		}
		return 1
	}))
	t.RawSetString("randomseed", L.NewFunction(func(L *lua.LState) int {
		seed := uint32(int32(L.CheckInt(1)))
		v.rng = uint64(seed)<<16 | 0x330E
		return 0
	}))
}
