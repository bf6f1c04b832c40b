// Package script runs Redis's Lua scripts (EVAL, EVALSHA) as redis-server
// 7.0 does, over gopher-lua (Lua 5.1 in pure Go): the sandbox and its
// libraries (base, table, string, math, cjson, bit, redis), Redis's
// conversions between Lua values and replies in both directions (RESP2 and
// RESP3), and a budget of instructions and bytes that stops a script the
// same way on every replica. It knows no engine, command or connection: a
// Host runs each redis.call and answers with the command's RESP reply, and
// a run returns the script's reply as RESP bytes for the client's protocol.
//
// Everything a script observes is a function of its inputs and of what the
// Host answers: math.random restarts from the same state every run,
// iteration follows gopher-lua's tables (insertion order, never a Go map),
// numbers print as C Lua prints them. docs/design.md, "Scripts", says what
// differs from C Lua and why.
//
// Locking: a Runtime's mutex guards its pool and its cache of compiled
// scripts; it is a leaf, never held while a script runs.
package script

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// Config sets a Runtime's budgets.
type Config struct {
	// MaxSteps bounds the VM instructions of one run (default
	// DefaultMaxSteps).
	MaxSteps int64
	// MaxMemory bounds the bytes one run creates in strings by
	// concatenation and the growing builtins (default DefaultMaxMemory).
	MaxMemory int64
	// Log receives redis.log's messages (level 0..3: debug, verbose,
	// notice, warning); nil drops them.
	Log func(level int, msg string)
}

// The default budgets. At 40-50 ns per VM instruction, 1,000,000 steps
// stop an endless loop in about 50 ms.
const (
	DefaultMaxSteps  = 1_000_000
	DefaultMaxMemory = 64 << 20
	// maxCallDepth bounds nested Lua calls (deep recursion stops with the
	// memory budget's error).
	maxCallDepth = 200
	// maxRegistry bounds a state's value stack, in slots.
	maxRegistry = 64 * 1024
	// maxResults is C Lua's LUAI_MAXCSTACK: the most values a builtin
	// may push (unpack, string.byte), as Redis's Lua refuses more.
	maxResults = 8000
	// maxProtos bounds the compiled scripts kept (a local cache: a miss
	// compiles again).
	maxProtos = 4096
	// maxPool bounds the idle states kept.
	maxPool = 64
)

// Host runs the commands a script calls.
type Host interface {
	// Call runs one command (args[0] its name) and returns its reply as
	// RESP bytes in protocol resp (2 or 3, as redis.setresp chose): an
	// error reply for a command refused inside a script.
	Call(args [][]byte, resp int) []byte
}

// Outcome is what a run ends in.
type Outcome uint8

// The outcomes.
const (
	// Done: the script returned (its reply may be an error reply).
	Done Outcome = iota
	// Failed: a runtime error ended the script; its writes stay.
	Failed
	// OutOfSteps and OutOfMemory: a budget ran out; the caller undoes the
	// script's writes.
	OutOfSteps
	OutOfMemory
)

// Texts are the replies the Runtime writes itself, so that the caller's
// catalogue keeps every error text (resp fills them in).
type Texts struct {
	// Compile is the prefix of a compile error ("ERR Error compiling
	// script (new function): ").
	Compile string
	// Steps and Memory are the budget errors, without the leading '-'.
	Steps, Memory string
	// Nesting is the error of a reply nested too deep.
	Nesting string
	// NoArgs, BadArg: redis.call without arguments, or with one that is
	// not a string or a number.
	NoArgs, BadArg string
	// ReadOnly: Attempt to modify a readonly table.
	ReadOnly string
	// NoGlobal: Script attempted to access nonexistent global variable
	// '%s'.
	NoGlobal string
	// WrongArgs: ERR wrong number or type of arguments (redis.*_reply).
	WrongArgs string
	// BadResp: ERR RESP version must be 2 or 3.
	BadResp string
	// Format: invalid format (width or precision too long).
	Format string
}

// Runtime runs scripts: a pool of Lua states and a cache of compiled
// scripts. It is safe for concurrent use.
type Runtime struct {
	cfg   Config
	texts Texts
	mu    sync.Mutex
	pool  []*vm
	// protos caches compiled scripts by SHA1; a compiled proto is
	// read-only and shared by every state.
	protos map[[sha1.Size]byte]*lua.FunctionProto
}

// New returns a Runtime.
func New(cfg Config, texts Texts) *Runtime {
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = DefaultMaxSteps
	}
	if cfg.MaxMemory <= 0 {
		cfg.MaxMemory = DefaultMaxMemory
	}
	return &Runtime{cfg: cfg, texts: texts, protos: make(map[[sha1.Size]byte]*lua.FunctionProto)}
}

// Config returns the runtime's budgets.
func (rt *Runtime) Config() Config { return rt.cfg }

// Compile compiles body, or returns the compile error's reply text
// (without '-').
func (rt *Runtime) Compile(body []byte) (*lua.FunctionProto, string) {
	sum := sha1.Sum(body)
	rt.mu.Lock()
	p, ok := rt.protos[sum]
	rt.mu.Unlock()
	if ok {
		return p, ""
	}
	chunk, err := parse.Parse(bytes.NewReader(body), "user_script")
	if err != nil {
		return nil, rt.texts.Compile + oneLine(err.Error())
	}
	p, err = lua.Compile(chunk, "user_script")
	if err != nil {
		return nil, rt.texts.Compile + oneLine(err.Error())
	}
	rt.mu.Lock()
	if len(rt.protos) >= maxProtos {
		clear(rt.protos)
	}
	rt.protos[sum] = p
	rt.mu.Unlock()
	return p, ""
}

// oneLine replaces the line breaks of an error text by spaces.
func oneLine(s string) string {
	s = strings.TrimRight(s, "\r\n")
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
}

// Run runs the script body (whose SHA1 is sha, lower-case hex) with keys
// and args, answering for a client of protocol resp (2 or 3), and returns
// its reply as RESP bytes and how it ended.
func (rt *Runtime) Run(sha string, body []byte, keys, args [][]byte, resp int, host Host) ([]byte, Outcome) {
	var proto *lua.FunctionProto
	var msg string
	// The compiled script by its SHA1 (given: not hashed again).
	var sum [sha1.Size]byte
	if len(sha) == 2*sha1.Size {
		if _, err := hex.Decode(sum[:], []byte(sha)); err == nil {
			rt.mu.Lock()
			proto = rt.protos[sum]
			rt.mu.Unlock()
		}
	}
	if proto == nil {
		proto, msg = rt.Compile(body)
	}
	if proto == nil {
		return errorReply(nil, msg), Failed
	}
	v := rt.get()
	defer rt.put(v)
	return v.run(proto, sha, keys, args, resp, host)
}

func (rt *Runtime) get() *vm {
	rt.mu.Lock()
	if n := len(rt.pool); n > 0 {
		v := rt.pool[n-1]
		rt.pool = rt.pool[:n-1]
		rt.mu.Unlock()
		return v
	}
	rt.mu.Unlock()
	return newVM(rt)
}

func (rt *Runtime) put(v *vm) {
	if v.broken {
		v.L.Close()
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.pool) < maxPool {
		rt.pool = append(rt.pool, v)
		return
	}
	v.L.Close()
}

// SHA1Hex returns body's SHA1 in lower-case hex.
func SHA1Hex(body []byte) string {
	sum := sha1.Sum(body)
	return hex.EncodeToString(sum[:])
}

// vm is one Lua state with Redis's sandbox, run by one script at a time.
type vm struct {
	rt *Runtime
	L  *lua.LState
	// g is the real globals table; env, the scripts' environment, is a
	// read-only view of it (libs.go).
	g, env *lua.LTable
	// readonly marks the read-only views (for rawset and setmetatable).
	readonly map[*lua.LTable]bool
	null     *lua.LUserData // cjson.null
	b        budget
	host     Host
	resp     int    // redis.setresp's protocol
	rng      uint64 // math.random's state (redisLrand48)
	broken   bool   // a run left the state unusable: do not pool it
	handler  *lua.LFunction
	args     [][]byte // redis.call's arguments, reused
}

func (v *vm) run(proto *lua.FunctionProto, sha string, keys, args [][]byte, resp int, host Host) (reply []byte, out Outcome) {
	L := v.L
	v.host, v.resp, v.rng = host, 2, rand48Init
	v.b = budget{L: L, maxSteps: v.rt.cfg.MaxSteps, maxBytes: v.rt.cfg.MaxMemory}
	v.g.RawSetString("KEYS", v.strings(keys))
	v.g.RawSetString("ARGV", v.strings(args))
	fn := L.NewFunctionFromProto(proto)
	fn.Env = v.env
	L.SetContext(&v.b)
	defer func() {
		L.RemoveContext()
		L.SetTop(0)
		v.g.RawSetString("KEYS", lua.LNil)
		v.g.RawSetString("ARGV", lua.LNil)
		v.host = nil
		if r := recover(); r != nil {
			v.broken = true
			reply, out = errorReply(nil, v.rt.texts.Memory), OutOfMemory
		}
	}()
	L.Push(fn)
	if v.handler == nil {
		v.handler = L.NewFunction(v.errorHandler)
	}
	err := L.PCall(0, 1, v.handler)
	switch {
	case v.b.stepsOut:
		return errorReply(nil, v.rt.texts.Steps), OutOfSteps
	case v.b.memoryOut:
		return errorReply(nil, v.rt.texts.Memory), OutOfMemory
	case err != nil:
		reply := v.failure(err, sha)
		if v.b.memoryOut { // a stack overflow: the memory budget
			return reply, OutOfMemory
		}
		return reply, Failed
	}
	ret := L.Get(-1)
	buf, ok := v.reply(nil, ret, resp, 0)
	if !ok {
		return errorReply(nil, v.rt.texts.Nesting), Failed
	}
	return buf, Done
}

// errorHandler turns the error object of a failed run into Redis's error
// table {err=, line=}, as the handler Redis installs does: a string
// becomes "ERR <text>"; the line is the innermost Lua function's.
func (v *vm) errorHandler(L *lua.LState) int {
	obj := L.Get(1)
	if v.b.spent() {
		L.Push(obj)
		return 1
	}
	var t *lua.LTable
	if tb, ok := obj.(*lua.LTable); ok {
		t = tb
	} else {
		t = L.NewTable()
		t.RawSetString("err", lua.LString("ERR "+v.str(obj)))
	}
	if line := v.line(); line > 0 {
		t.RawSetString("line", lua.LNumber(line))
	}
	L.Push(t)
	return 1
}

// line returns the current line of the innermost Lua function on the
// stack, or 0.
func (v *vm) line() int {
	for level := 1; level < maxCallDepth+8; level++ {
		dbg, ok := v.L.GetStack(level)
		if !ok {
			return 0
		}
		if _, err := v.L.GetInfo("Sl", dbg, lua.LNil); err != nil {
			return 0
		}
		if dbg.What != "G" && dbg.CurrentLine > 0 {
			return dbg.CurrentLine
		}
	}
	return 0
}

// failure renders a run's error: the error table's err, then Redis's
// " script: <sha>, on @user_script:<line>." when the line is known.
func (v *vm) failure(err error, sha string) []byte {
	msg := "ERR " + oneLine(err.Error())
	line := 0
	if ae, ok := err.(*lua.ApiError); ok {
		if t, ok := ae.Object.(*lua.LTable); ok {
			if e, ok := t.RawGetString("err").(lua.LString); ok {
				msg = string(e)
			} else {
				msg = "ERR " + v.str(t)
			}
			if n, ok := t.RawGetString("line").(lua.LNumber); ok {
				line = int(n)
			}
		} else if ae.Object != nil && ae.Object != lua.LNil {
			if isStackOverflow(v.str(ae.Object)) {
				v.b.memoryOut = true
				return errorReply(nil, v.rt.texts.Memory)
			}
			msg = "ERR " + v.str(ae.Object)
		}
	}
	if isStackOverflow(msg) {
		v.b.memoryOut = true
		return errorReply(nil, v.rt.texts.Memory)
	}
	if line > 0 {
		msg += " script: " + sha + ", on @user_script:" + strconv.Itoa(line) + "."
	}
	return errorReply(nil, msg)
}

// isStackOverflow reports whether msg is gopher-lua's error for a call
// stack past maxCallDepth (deep recursion: the memory budget).
func isStackOverflow(msg string) bool { return strings.HasSuffix(msg, "stack overflow") }

// str is tostring of a Lua value for an error text.
func (v *vm) str(lv lua.LValue) string {
	switch x := lv.(type) {
	case lua.LString:
		return string(x)
	case lua.LNumber:
		return fmtNumber(float64(x), 14)
	}
	return lv.Type().String() // never an address: replicas must agree
}

// strings returns a Lua array of ss.
func (v *vm) strings(ss [][]byte) *lua.LTable {
	t := v.L.CreateTable(len(ss), 0)
	for i, s := range ss {
		t.RawSetInt(i+1, lua.LString(s))
	}
	return t
}

// errorReply appends "-msg\r\n" with line breaks made spaces.
func errorReply(b []byte, msg string) []byte {
	b = append(b, '-')
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return append(b, '\r', '\n')
}
