package engine

import (
	"bytes"
	"math"
	"strconv"
	"testing"
)

// strModel is the reference the string ops are checked against: a map of
// values with expiries (ms, 0: none), judged at the op's time.
type strModel struct {
	vals map[string]string
	exp  map[string]int64
}

func (m *strModel) live(k string, now int64) bool {
	if _, ok := m.vals[k]; !ok {
		return false
	}
	if e := m.exp[k]; e != 0 && now >= e*1e6 {
		delete(m.vals, k)
		delete(m.exp, k)
		return false
	}
	return true
}

// apply runs op on the model and returns what the engine must reply.
func (m *strModel) apply(op *Op, now int64) Result {
	k := string(op.Key)
	live := m.live(k, now)
	nowMs := now / 1e6
	switch op.Code {
	case OpGet:
		if live {
			return Result{Kind: KindString, Value: []byte(m.vals[k])}
		}
		return Result{}
	case OpSet:
		var r Result
		if op.Flags&StrGet != 0 && live {
			r = Result{Kind: KindString, Value: []byte(m.vals[k])}
		}
		if op.Flags&StrNX != 0 && live || op.Flags&StrXX != 0 && !live {
			return r
		}
		e := int64(0)
		switch {
		case op.Flags&StrExpireRel != 0:
			e = nowMs + op.Expire
		case op.Flags&StrExpireAbs != 0:
			e = op.Expire
		case op.Flags&StrKeepTTL != 0 && live:
			e = m.exp[k]
		}
		m.vals[k], m.exp[k] = string(op.Value), e
		r.Count = 1
		return r
	case OpIncrBy:
		v := int64(0)
		if live {
			var ok bool
			if v, ok = ParseInt([]byte(m.vals[k])); !ok {
				return Result{Err: ErrNotInteger}
			}
		} else {
			m.exp[k] = 0
		}
		if op.Delta > 0 && v > math.MaxInt64-op.Delta || op.Delta < 0 && v < math.MinInt64-op.Delta {
			return Result{Err: ErrIncrOverflow}
		}
		m.vals[k] = strconv.FormatInt(v+op.Delta, 10)
		return Result{Count: v + op.Delta}
	case OpExpire:
		if !live {
			return Result{}
		}
		when := op.Expire
		if op.Flags&StrExpireRel != 0 {
			when += nowMs
		}
		m.exp[k] = when
		return Result{Count: 1}
	case OpPersist:
		if !live || m.exp[k] == 0 {
			return Result{}
		}
		m.exp[k] = 0
		return Result{Count: 1}
	case OpDelete:
		delete(m.vals, k)
		if live {
			return Result{Count: 1}
		}
		return Result{}
	case OpExpireTime:
		switch {
		case !live:
			return Result{Time: -2}
		case m.exp[k] == 0:
			return Result{Time: -1}
		}
		return Result{Time: m.exp[k]}
	}
	panic("op not modelled")
}

// FuzzStringOps runs random string ops at moving times on the engine and
// on the model, and requires the same results, the same live keys, a
// well-ordered expiry heap, and an engine restored from its export with
// the same digest.
func FuzzStringOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Add(bytes.Repeat([]byte{3, 200, 7, 1, 9, 0, 2, 5}, 40))
	f.Fuzz(func(t *testing.T, data []byte) {
		e := New(Config{Stripes: 2})
		m := &strModel{vals: map[string]string{}, exp: map[string]int64{}}
		fo := &fuzzOps{b: data}
		now := align(t0, sec)
		keys := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("dd")}
		vals := [][]byte{[]byte("1"), []byte("-5"), []byte("x"), []byte("9223372036854775806"), {}}
		for !fo.done() {
			b0, b1, b2 := fo.next(), fo.next(), fo.next()
			now += int64(b2%8) * int64(b2) * 1e6 / 3
			op := Op{Key: keys[b0%4]}
			ms := int64(b1%16) * 100
			switch b0 / 4 % 9 {
			case 0:
				op.Code = OpGet
			case 1:
				op.Code, op.Value = OpSet, vals[b1%5]
				op.Flags = []uint32{0, StrNX, StrXX, StrGet, StrKeepTTL, StrExpireRel, StrExpireAbs, StrGet | StrXX}[b1/5%8]
				op.Expire = ms + 1
				if op.Flags&StrExpireAbs != 0 {
					op.Expire = now/1e6 + ms - 500
				}
			case 2, 3:
				op.Code, op.Delta = OpIncrBy, int64(int8(b1))
			case 4:
				op.Code, op.Flags, op.Expire = OpExpire, StrExpireRel, ms-300
			case 5:
				op.Code = OpPersist
			case 6:
				op.Code = OpDelete
			case 7:
				op.Code = OpExpireTime
			case 8:
				op.Code, op.Flags, op.Expire = OpExpire, StrExpireAbs, now/1e6+ms
			}
			want := m.apply(&op, now)
			var res [1]Result
			e.Apply(now, []Op{op}, res[:])
			got := res[0]
			if got.Err != want.Err || answerNum(op.Code, &got) != answerNum(op.Code, &want) || got.Kind != want.Kind || !bytes.Equal(got.Value, want.Value) {
				t.Fatalf("op %d %q flags %#x at %d: got %+v, want %+v", op.Code, op.Key, op.Flags, now, got, want)
			}
		}
		var res [1]Result
		e.Apply(now, []Op{{Code: OpCount}}, res[:])
		n := 0
		for k := range m.vals {
			if m.live(k, now) {
				n++
			}
		}
		if res[0].Count != int64(n) {
			t.Fatalf("DBSIZE %d, model %d", res[0].Count, n)
		}
		for _, s := range e.stripes {
			for i := 1; i < len(s.strs.heap); i++ {
				if s.heapLess(i, (i-1)/2) {
					t.Fatal("heap order broken")
				}
			}
			for i, idx := range s.strs.heap {
				if s.entry(idx).c != int64(i+1) {
					t.Fatal("heap position not recorded")
				}
			}
		}
		r := New(Config{Stripes: 2})
		r.SetClockState(e.ClockState())
		for i := range e.NumStripes() {
			for _, rec := range e.ExportStripe(i, e.ClockState().Last) {
				if err := r.Import(rec); err != nil {
					t.Fatal(err)
				}
			}
		}
		if a, _ := e.Digest(); func() bool { b, _ := r.Digest(); return a != b }() {
			t.Fatal("restored engine's digest differs")
		}
	})
}
