package codec

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// The results of a forwarded batch (codec.go has the entries, ops.go the
// ops): the leader encodes each op's engine.Result, its error as a code
// (AppendError), and the follower decodes them, rebuilding the errors
// its callers test with errors.Is (Sentinels).

// countField returns the number of result r, the answer of an op of code,
// that travels in the wire's count field: the one the op's row names
// (engine.Answer).
func countField(code engine.OpCode, r *engine.Result) *int64 {
	switch code.Answer() {
	case engine.AnswerTTL:
		return &r.TTL
	case engine.AnswerTime:
		return &r.Time
	}
	return &r.Count
}

// Results, for the forwarding protocol: the leader computes them and the
// follower relays them.
//
//	results: uvarint n | result*
//	result:  uvarint field mask | fields in mask order (see result*)
//	         (the error field: see AppendError)
const (
	resultErr = 1 << iota
	resultKind
	resultAllowed
	resultLimit
	resultRemaining
	resultRetry
	resultReset
	resultCount
	resultCursor
	resultKeys
	resultEach  // RL.ALL's per-limit results: uvarint n | result*
	resultValue // a string key's value: string
	// resultValues: a collection op's list: uvarint n | (uvarint 0 for nil,
	// else uvarint len+1 | bytes)*
	resultValues
)

// AppendError encodes err as its code, detail and number: never a reply
// text (the RESP server renders those). An error without a code goes as
// Other with its text as the detail.
//
//	error: code byte | string detail | varint num
func AppendError(b []byte, err error) []byte {
	e := errcode.Of(err)
	if e == nil {
		e = &errcode.Error{Code: errcode.Other, Detail: err.Error()}
	}
	b = append(b, byte(e.Code))
	b = binary.AppendUvarint(b, uint64(len(e.Detail)))
	b = append(b, e.Detail...)
	return binary.AppendVarint(b, e.Num)
}

// Sentinels are the errors without details that a decoded code turns
// back into, so that an error that came over the wire is the very value
// (==) a local one is; cluster keeps its table in errors.go.
type Sentinels []error

// Rebuild rebuilds a coded error that came over the wire: the sentinel of
// code when it has no details, else a new value.
func (s Sentinels) Rebuild(code errcode.Code, detail string, num int64) error {
	if detail == "" && num == 0 {
		for _, e := range s {
			if errcode.Of(e).Code == code {
				return e
			}
		}
	}
	return &errcode.Error{Code: code, Detail: detail, Num: num}
}

// CodedError reads an error AppendError wrote: the sentinel value in s
// when it has no details (so errors.Is and == work as on the leader), else
// a new one. A code this node does not know is malformed: all nodes run
// the same version.
func (d *Decoder) CodedError(s Sentinels) error {
	code := errcode.Code(d.Byte())
	detail := d.Str()
	num := d.Varint()
	if d.Err == nil && code >= errcode.NumCodes {
		d.Err = fmt.Errorf("%w: unknown error code %d", ErrMalformed, code)
	}
	if d.Err != nil {
		return nil
	}
	return s.Rebuild(code, string(detail), num)
}

// AppendResults appends a count and the results (the format's "results"):
// rs[i] answers ops[i], whose code says which of its numbers travels in
// the count field (countField; Count for a result without its op).
func AppendResults(b []byte, ops []engine.Op, rs []engine.Result) []byte {
	b = binary.AppendUvarint(b, uint64(len(rs)))
	for i := range rs {
		b = appendResult(b, codeOf(ops, i), &rs[i])
	}
	return b
}

// codeOf is the code of ops[i], 0 (an op answering in Count) past the end.
func codeOf(ops []engine.Op, i int) engine.OpCode {
	if i < len(ops) {
		return ops[i].Code
	}
	return 0
}

// appendResult appends r, an op of code's result. The per-limit results
// (Each) are decisions: they answer in Count.
func appendResult(b []byte, code engine.OpCode, r *engine.Result) []byte {
	count := *countField(code, r)
	var mask uint64
	if r.Err != nil {
		mask |= resultErr
	}
	if r.Kind != 0 {
		mask |= resultKind
	}
	if r.Allowed {
		mask |= resultAllowed
	}
	if r.Limit != 0 {
		mask |= resultLimit
	}
	if r.Remaining != 0 {
		mask |= resultRemaining
	}
	if r.RetryAfter != 0 {
		mask |= resultRetry
	}
	if r.ResetAfter != 0 {
		mask |= resultReset
	}
	if count != 0 {
		mask |= resultCount
	}
	if r.Cursor != 0 {
		mask |= resultCursor
	}
	if r.Keys != nil {
		mask |= resultKeys
	}
	if r.Each != nil {
		mask |= resultEach
	}
	if r.Value != nil {
		mask |= resultValue
	}
	if r.Values != nil {
		mask |= resultValues
	}
	b = binary.AppendUvarint(b, mask)
	if r.Err != nil {
		b = AppendError(b, r.Err)
	}
	if r.Kind != 0 {
		b = append(b, byte(r.Kind))
	}
	for _, v := range []struct {
		bit uint64
		v   int64
	}{{resultLimit, r.Limit}, {resultRemaining, r.Remaining}, {resultRetry, r.RetryAfter}, {resultReset, r.ResetAfter}, {resultCount, count}} {
		if mask&v.bit != 0 {
			b = binary.AppendVarint(b, v.v)
		}
	}
	if r.Cursor != 0 {
		b = binary.AppendUvarint(b, r.Cursor)
	}
	if r.Keys != nil {
		b = binary.AppendUvarint(b, uint64(len(r.Keys)))
		for _, k := range r.Keys {
			b = AppendStr(b, k)
		}
	}
	if r.Each != nil {
		b = binary.AppendUvarint(b, uint64(len(r.Each)))
		for i := range r.Each {
			b = appendResult(b, 0, &r.Each[i])
		}
	}
	if r.Value != nil {
		b = AppendStr(b, r.Value)
	}
	if r.Values != nil {
		b = binary.AppendUvarint(b, uint64(len(r.Values)))
		for _, v := range r.Values {
			if v == nil {
				b = append(b, 0)
				continue
			}
			b = binary.AppendUvarint(b, uint64(len(v))+1)
			b = append(b, v...)
		}
	}
	return b
}

// DecodeResults decodes results into rs, which must have the length the
// encoding says, rs[i] answering ops[i] (as AppendResults); their errors
// become s's sentinels where they can. Keys are copied out of data.
func DecodeResults(data []byte, ops []engine.Op, rs []engine.Result, s Sentinels) error {
	d := NewDecoder(data)
	n := d.Uvarint()
	if d.Err == nil && n != uint64(len(rs)) {
		return fmt.Errorf("%w: %d results for %d ops", ErrMalformed, n, len(rs))
	}
	for i := 0; i < len(rs) && d.Err == nil; i++ {
		rs[i] = d.result(codeOf(ops, i), true, s)
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%w: %d stray bytes after the results", ErrMalformed, len(d.B))
	}
	return d.Err
}

// result reads one result, an op of code's; nested says whether it may
// hold per-limit results (one level only); its error becomes one of s
// where it can.
func (d *Decoder) result(code engine.OpCode, nested bool, s Sentinels) engine.Result {
	r := engine.Result{}
	mask := d.Uvarint()
	if mask&resultErr != 0 {
		r.Err = d.CodedError(s)
	}
	if mask&resultKind != 0 {
		r.Kind = engine.Kind(d.Byte())
	}
	r.Allowed = mask&resultAllowed != 0
	for _, f := range []struct {
		bit uint64
		p   *int64
	}{{resultLimit, &r.Limit}, {resultRemaining, &r.Remaining}, {resultRetry, &r.RetryAfter}, {resultReset, &r.ResetAfter}, {resultCount, countField(code, &r)}} {
		if mask&f.bit != 0 {
			*f.p = d.Varint()
		}
	}
	if mask&resultCursor != 0 {
		r.Cursor = d.Uvarint()
	}
	if mask&resultKeys != 0 {
		k := d.Uvarint()
		if d.Err == nil && k > uint64(len(d.B)) { // each key takes at least its length byte
			d.Err = fmt.Errorf("%w: %d keys in %d bytes", ErrMalformed, k, len(d.B))
		}
		if d.Err == nil {
			r.Keys = make([][]byte, 0, k)
			for j := uint64(0); j < k && d.Err == nil; j++ {
				r.Keys = append(r.Keys, bytes.Clone(d.Str()))
			}
		}
	}
	if mask&resultEach != 0 {
		k := d.Uvarint()
		if d.Err == nil && (!nested || k > engine.MaxAll || k > uint64(len(d.B))) {
			d.Err = fmt.Errorf("%w: %d per-limit results in %d bytes", ErrMalformed, k, len(d.B))
		}
		if d.Err == nil {
			r.Each = make([]engine.Result, k)
			for j := range r.Each {
				r.Each[j] = d.result(0, false, s)
			}
		}
	}
	if mask&resultValue != 0 {
		r.Value = append([]byte{}, d.Str()...)
	}
	if mask&resultValues != 0 {
		r.Values = d.values()
	}
	return r
}

// values reads a result's list (resultValues), copied out of the input,
// its nil elements kept nil.
func (d *Decoder) values() [][]byte {
	n := d.Uvarint()
	if d.Err == nil && n > uint64(len(d.B)) { // each takes at least one byte
		d.Err = fmt.Errorf("%w: %d values in %d bytes", ErrMalformed, n, len(d.B))
	}
	if d.Err != nil {
		return nil
	}
	vs := make([][]byte, 0, n)
	for j := uint64(0); j < n && d.Err == nil; j++ {
		l := d.Uvarint()
		if l == 0 {
			vs = append(vs, nil)
			continue
		}
		if d.Err == nil && l-1 > uint64(len(d.B)) {
			d.Err = fmt.Errorf("%w: a value of %d bytes in %d", ErrMalformed, l-1, len(d.B))
		}
		if d.Err == nil {
			vs = append(vs, append([]byte{}, d.B[:l-1]...))
			d.B = d.B[l-1:]
		}
	}
	return vs
}
