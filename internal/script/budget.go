package script

import (
	"context"
	"errors"
	"reflect"
	"time"
	"unsafe"

	lua "github.com/yuin/gopher-lua"
)

// The budget of one run: gopher-lua calls its context's Done before every
// VM instruction (mainLoopWithContext), so a Done that counts its calls
// stops the VM after the same number of instructions on every replica
// (a wall-clock deadline would not). Done also looks at the instruction
// about to run: a string concatenation (OP_CONCAT, which no Lua hook
// reaches) is charged its result's bytes before it allocates them, so the
// doubling `s = s .. s` stops at the memory budget. The builtins that can
// grow memory fast (string.rep, string.format, table.concat, string.gsub,
// cjson.encode) charge their results the same way (libs.go).

// errBudget is what the context reports once a budget is spent.
var errBudget = errors.New("script budget exceeded")

// closed is a closed channel: Done's answer once a budget is spent.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// budget is a context.Context counting VM instructions and created bytes.
type budget struct {
	L         *lua.LState
	steps     int64
	maxSteps  int64
	bytes     int64
	maxBytes  int64
	stepsOut  bool
	memoryOut bool
}

func (b *budget) Deadline() (time.Time, bool) { return time.Time{}, false }
func (b *budget) Value(any) any               { return nil }

func (b *budget) Err() error {
	if b.stepsOut || b.memoryOut {
		return errBudget
	}
	return nil
}

func (b *budget) Done() <-chan struct{} {
	if b.stepsOut || b.memoryOut {
		return closed
	}
	b.steps++
	if b.steps > b.maxSteps {
		b.stepsOut = true
		return closed
	}
	if n := concatBytes(b.L); n > 0 && !b.charge(n) {
		return closed
	}
	return nil
}

// charge counts n created bytes and reports whether the budget holds them.
func (b *budget) charge(n int64) bool {
	b.bytes += n
	if b.bytes > b.maxBytes || n < 0 {
		b.memoryOut = true
		return false
	}
	return true
}

// chargeSteps counts n more steps (work done out of the VM) and reports
// whether the budget holds them.
func (b *budget) chargeSteps(n float64) bool {
	if n >= float64(b.maxSteps-b.steps) {
		b.stepsOut = true
		return false
	}
	b.steps += int64(n)
	return true
}

// spent reports whether a budget ran out.
func (b *budget) spent() bool { return b.stepsOut || b.memoryOut }

var _ context.Context = (*budget)(nil)

// The offsets of gopher-lua v1.1.2's unexported fields that concatBytes
// reads (LState.currentFrame, LState.reg, registry.array and the frame's
// Fn, Pc and LocalBase), found by reflection once; ok is false if the
// layout is not as expected, and concatenations then go uncharged
// (TestConcatCharged fails).
var layout = func() (l struct {
	ok                                   bool
	frame, reg, array, fn, pc, localBase uintptr
}) {
	st := reflect.TypeOf(lua.LState{})
	cf, ok1 := st.FieldByName("currentFrame")
	rg, ok2 := st.FieldByName("reg")
	if !ok1 || !ok2 || cf.Type.Kind() != reflect.Pointer || rg.Type.Kind() != reflect.Pointer {
		return l
	}
	ft, rt := cf.Type.Elem(), rg.Type.Elem()
	fn, ok3 := ft.FieldByName("Fn")
	pc, ok4 := ft.FieldByName("Pc")
	lb, ok5 := ft.FieldByName("LocalBase")
	arr, ok6 := rt.FieldByName("array")
	if !ok3 || !ok4 || !ok5 || !ok6 || fn.Type != reflect.TypeOf((*lua.LFunction)(nil)) ||
		pc.Type.Kind() != reflect.Int || lb.Type.Kind() != reflect.Int || arr.Type != reflect.TypeOf([]lua.LValue(nil)) {
		return l
	}
	l.ok = true
	l.frame, l.reg, l.array, l.fn, l.pc, l.localBase = cf.Offset, rg.Offset, arr.Offset, fn.Offset, pc.Offset, lb.Offset
	return l
}()

// concatBytes returns the bytes the instruction L is about to run creates
// when it is a concatenation, else 0. It also turns the concatenation's
// number operands into their text as C Lua writes them (%.14g), which
// gopher-lua's concatenation would write in Go's shortest form: the
// operands are temporaries the compiler copied for the instruction
// (compileStringConcatOpExpr), so no variable changes.
func concatBytes(L *lua.LState) int64 {
	if !layout.ok || L == nil {
		return 0
	}
	cf := *(*unsafe.Pointer)(unsafe.Add(unsafe.Pointer(L), layout.frame))
	if cf == nil {
		return 0
	}
	fn := *(**lua.LFunction)(unsafe.Add(cf, layout.fn))
	if fn == nil || fn.IsG || fn.Proto == nil {
		return 0
	}
	pc := *(*int)(unsafe.Add(cf, layout.pc))
	code := fn.Proto.Code
	if pc < 1 || pc > len(code) {
		return 0
	}
	inst := code[pc-1]
	if int(inst>>26) != lua.OP_CONCAT {
		return 0
	}
	reg := *(*unsafe.Pointer)(unsafe.Add(unsafe.Pointer(L), layout.reg))
	if reg == nil {
		return 0
	}
	arr := *(*[]lua.LValue)(unsafe.Add(reg, layout.array))
	base := *(*int)(unsafe.Add(cf, layout.localBase))
	b, c := base+int(inst&0x1ff), base+int(inst>>9)&0x1ff
	var n int64
	for i := b; i <= c && i < len(arr); i++ {
		switch v := arr[i].(type) {
		case lua.LString:
			n += int64(len(v))
		case lua.LNumber:
			str := fmtNumber(float64(v), 14)
			arr[i] = lua.LString(str)
			n += int64(len(str))
		}
	}
	return n
}
