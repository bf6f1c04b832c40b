package script

import (
	"strings"
	"unsafe"

	lua "github.com/yuin/gopher-lua"
)

// The redis library of the sandbox (libs.go loads it with the others):
// redis.call and redis.pcall, which hand a script's commands to the Host
// and bring its replies back as Lua values, and the helpers Redis 7.0
// offers beside them (error_reply, status_reply, sha1hex, log, setresp,
// the no-ops of replication and debugging, the version).

// redisLib is the redis table.
func (v *vm) redisLib() *lua.LTable {
	L := v.L
	t := L.NewTable()
	t.RawSetString("call", L.NewFunction(func(L *lua.LState) int { return v.call(L, true) }))
	t.RawSetString("pcall", L.NewFunction(func(L *lua.LState) int { return v.call(L, false) }))
	t.RawSetString("error_reply", L.NewFunction(func(L *lua.LState) int {
		s, ok := L.Get(1).(lua.LString)
		if L.GetTop() != 1 || !ok {
			L.Push(errorTable(L, v.rt.texts.WrongArgs))
			return 1
		}
		e := string(s)
		if !strings.HasPrefix(e, "-") {
			e = "-" + e
		}
		r := L.NewTable()
		r.RawSetString("err", lua.LString(errorText(e)))
		L.Push(r)
		return 1
	}))
	t.RawSetString("status_reply", L.NewFunction(func(L *lua.LState) int {
		s, ok := L.Get(1).(lua.LString)
		if L.GetTop() != 1 || !ok {
			L.Push(errorTable(L, v.rt.texts.WrongArgs))
			return 1
		}
		r := L.NewTable()
		r.RawSetString("ok", s)
		L.Push(r)
		return 1
	}))
	t.RawSetString("sha1hex", L.NewFunction(func(L *lua.LState) int {
		if L.GetTop() != 1 {
			L.RaiseError("wrong number of arguments")
		}
		L.Push(lua.LString(SHA1Hex([]byte(L.ToString(1)))))
		return 1
	}))
	t.RawSetString("log", L.NewFunction(func(L *lua.LState) int {
		if L.GetTop() < 2 {
			L.RaiseError("redis.log() requires two arguments or more.")
		}
		level := L.CheckInt(1)
		if level < 0 || level > 3 {
			L.RaiseError("Invalid debug level.")
		}
		if v.rt.cfg.Log != nil {
			var parts []string
			for i := 2; i <= L.GetTop(); i++ {
				parts = append(parts, L.ToString(i))
			}
			v.rt.cfg.Log(level, strings.Join(parts, " "))
		}
		return 0
	}))
	t.RawSetString("setresp", L.NewFunction(func(L *lua.LState) int {
		n, ok := L.Get(1).(lua.LNumber)
		if L.GetTop() != 1 || !ok || (n != 2 && n != 3) {
			e := errorTable(L, v.rt.texts.BadResp)
			if line := v.line(); line > 0 {
				e.RawSetString("line", lua.LNumber(line))
			}
			L.Error(e, 0)
		}
		v.resp = int(n)
		return 0
	}))
	t.RawSetString("replicate_commands", L.NewFunction(func(L *lua.LState) int {
		L.Push(lua.LTrue)
		return 1
	}))
	t.RawSetString("set_repl", L.NewFunction(func(L *lua.LState) int { return 0 }))
	t.RawSetString("breakpoint", L.NewFunction(func(L *lua.LState) int {
		L.Push(lua.LFalse)
		return 1
	}))
	t.RawSetString("debug", L.NewFunction(func(L *lua.LState) int { return 0 }))
	// In a fixed order: pairs(redis) must not depend on a Go map's.
	for _, c := range []struct {
		name string
		n    int
	}{{"LOG_DEBUG", 0}, {"LOG_VERBOSE", 1}, {"LOG_NOTICE", 2}, {"LOG_WARNING", 3},
		{"REPL_NONE", 0}, {"REPL_AOF", 1}, {"REPL_SLAVE", 2}, {"REPL_REPLICA", 2}, {"REPL_ALL", 3}} {
		t.RawSetString(c.name, lua.LNumber(c.n))
	}
	t.RawSetString("REDIS_VERSION", lua.LString("7.0.15"))
	t.RawSetString("REDIS_VERSION_NUM", lua.LNumber(0x07000f))
	return t
}

// call is redis.call (raise) and redis.pcall: the arguments, strings or
// numbers (formatted %.17g as Redis 7.0 does), go to the Host, and its
// reply comes back as a Lua value; an error reply is raised by
// redis.call and returned by redis.pcall.
func (v *vm) call(L *lua.LState, raise bool) int {
	n := L.GetTop()
	fail := func(text string) int {
		e := errorTable(L, text)
		if raise {
			if line := v.line(); line > 0 {
				e.RawSetString("line", lua.LNumber(line))
			}
			L.Error(e, 0)
		}
		L.Push(e)
		return 1
	}
	if n == 0 {
		return fail(v.rt.texts.NoArgs)
	}
	// The arguments alias the Lua strings (the Host keeps none of them
	// past the call: the engine copies what it stores), in a slice
	// reused from call to call.
	args := v.args[:0]
	for i := 1; i <= n; i++ {
		switch x := L.Get(i).(type) {
		case lua.LString:
			args = append(args, unsafe.Slice(unsafe.StringData(string(x)), len(x)))
		case lua.LNumber:
			args = append(args, FormatArg(nil, float64(x)))
		default:
			return fail(v.rt.texts.BadArg)
		}
	}
	v.args = args
	out := v.host.Call(args, v.resp)
	clear(args)
	val, _, ok := v.parseReply(out, 0)
	if !ok {
		return fail(v.rt.texts.Nesting)
	}
	if t, isT := val.(*lua.LTable); isT && raise {
		if _, isErr := t.RawGetString("err").(lua.LString); isErr {
			if line := v.line(); line > 0 {
				t.RawSetString("line", lua.LNumber(line))
			}
			L.Error(t, 0)
		}
	}
	L.Push(val)
	return 1
}
