// Package respwire is the client side of the Redis protocol (RESP2 and
// RESP3) for sluice's tools and tests: it encodes commands, reads replies
// into a Value within Limits that a hostile or broken server cannot make it
// exceed, and renders a Value as the compact text the tests assert on
// ("*5 [:1 :4 :3 :0 :15000]").
//
// It is deliberately small and not a general client: one request at a
// time, no attributes (RESP3 '|'), no streamed strings or aggregates.
package respwire

import (
	"strconv"
)

// AppendCommand appends args to dst as one RESP command (an array of bulk
// strings, the form every Redis server accepts) and returns the extended
// buffer.
func AppendCommand(dst []byte, args ...string) []byte {
	dst = AppendArray(dst, len(args))
	for _, a := range args {
		dst = AppendBulk(dst, a)
	}
	return dst
}

// AppendArray appends the header of an array of n elements: a command
// assembled from parts (the load generator's templates).
func AppendArray(dst []byte, n int) []byte { return appendHeader(dst, '*', n) }

// AppendBulk appends s as a bulk string.
func AppendBulk[S string | []byte](dst []byte, s S) []byte {
	dst = appendHeader(dst, '$', len(s))
	dst = append(dst, s...)
	return append(dst, '\r', '\n')
}

// appendHeader appends a type byte, a count and CRLF.
func appendHeader(dst []byte, kind byte, n int) []byte {
	dst = append(dst, kind)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, '\r', '\n')
}

// Kind is the type of a reply; its value is the byte that introduces the
// type on the wire.
type Kind byte

// The reply types Read understands: RESP2's five, then RESP3's.
const (
	SimpleString   Kind = '+' // Str: the text
	SimpleError    Kind = '-' // Str: the text, without the dash
	Integer        Kind = ':' // Int: the value
	BulkString     Kind = '$' // Str: the bytes; Null for $-1
	Array          Kind = '*' // Elems: the elements; Null for *-1
	Null           Kind = '_' // RESP3 null: no payload
	Double         Kind = ',' // Str: the text as sent ("1.5", "inf", "nan")
	Boolean        Kind = '#' // Int: 1 for true, 0 for false
	BigNumber      Kind = '(' // Str: the digits, with any sign
	BulkError      Kind = '!' // Str: the text
	VerbatimString Kind = '=' // Str: the format, a colon, the text ("txt:...")
	Map            Kind = '%' // Elems: key, value, key, value...
	Set            Kind = '~' // Elems: the members
	Push           Kind = '>' // Elems: the push's kind, then its data
)

// Value is one reply. Which fields hold its payload depends on Kind (see
// the Kind constants); the others are zero.
type Value struct {
	// Kind is the reply's type.
	Kind Kind
	// Null marks a RESP2 null: a null bulk string ($-1) or null array
	// (*-1). A RESP3 null is Kind Null instead; IsNull reports either.
	Null bool
	// Str is the payload of a string-like reply.
	Str string
	// Int is the value of an Integer, or of a Boolean as 1 or 0.
	Int int64
	// Elems are an aggregate's elements; a Map's alternate key and value.
	Elems []Value
}

// IsNull reports whether v is a null of either protocol version.
func (v Value) IsNull() bool { return v.Null || v.Kind == Null }

// IsAggregate reports whether v's Kind holds Elems.
func (v Value) IsAggregate() bool {
	switch v.Kind {
	case Array, Map, Set, Push:
		return true
	}
	return false
}

// Style chooses how Text renders string payloads that carry a length on
// the wire (bulk strings, bulk errors and verbatim strings).
type Style uint8

const (
	// WithLengths keeps the length: "$3 foo", "=8 txt:abcd".
	WithLengths Style = iota
	// NoLengths drops it: "$foo", "=txt:abcd".
	NoLengths
)

// Text renders v on one line, close to the wire: "+OK", "-ERR x", ":1",
// "$3 foo" (or "$foo", per s), "$-1", "_", ",1.5", "#t", "(123",
// "=8 txt:abcd", and an aggregate as its type byte and count, then its
// elements in brackets: "*2 [:1 $1 a]", "*-1", "%1 [$1 k :1]" (a map
// counts its pairs), "~0 []", ">2 [...]".
func (v Value) Text(s Style) string { return string(v.AppendText(nil, s)) }

// String is Text(WithLengths), for logs and failure messages.
func (v Value) String() string { return v.Text(WithLengths) }

// AppendText appends Text(s) to dst and returns the extended buffer.
func (v Value) AppendText(dst []byte, s Style) []byte {
	if v.Null {
		if v.IsAggregate() {
			return append(dst, "*-1"...)
		}
		return append(dst, "$-1"...)
	}
	dst = append(dst, byte(v.Kind))
	switch v.Kind {
	case Null:
		return dst
	case Integer:
		return strconv.AppendInt(dst, v.Int, 10)
	case Boolean:
		if v.Int != 0 {
			return append(dst, 't')
		}
		return append(dst, 'f')
	case BulkString, BulkError, VerbatimString:
		if s == WithLengths {
			dst = strconv.AppendInt(dst, int64(len(v.Str)), 10)
			dst = append(dst, ' ')
		}
		return append(dst, v.Str...)
	case Array, Map, Set, Push:
		n := len(v.Elems)
		if v.Kind == Map {
			n /= 2
		}
		dst = strconv.AppendInt(dst, int64(n), 10)
		dst = append(dst, " ["...)
		for i, e := range v.Elems {
			if i > 0 {
				dst = append(dst, ' ')
			}
			dst = e.AppendText(dst, s)
		}
		return append(dst, ']')
	}
	return append(dst, v.Str...)
}

// Error returns the text of an error reply (simple or bulk), "" for any
// other reply.
func (v Value) Error() string {
	if v.Kind == SimpleError || v.Kind == BulkError {
		return v.Str
	}
	return ""
}

// Ints returns the integers of an array of integers (sluice's limiter
// replies); ok is false for any other reply.
func (v Value) Ints() (ints []int64, ok bool) {
	if v.Kind != Array || v.Null {
		return nil, false
	}
	ints = make([]int64, len(v.Elems))
	for i, e := range v.Elems {
		if e.Kind != Integer {
			return nil, false
		}
		ints[i] = e.Int
	}
	return ints, true
}

// Fields returns the pairs of a flat array or map of names and values
// (RAFT.STATUS, CONFIG GET) as a map of strings; integers in decimal.
func (v Value) Fields() map[string]string {
	m := make(map[string]string, len(v.Elems)/2)
	for i := 0; i+1 < len(v.Elems); i += 2 {
		val := v.Elems[i+1]
		if val.Kind == Integer {
			m[v.Elems[i].Str] = strconv.FormatInt(val.Int, 10)
		} else {
			m[v.Elems[i].Str] = val.Str
		}
	}
	return m
}
