package respwire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
)

// Defaults for the zero fields of Limits. The deepest reply sluice sends,
// COMMAND DOCS, nests its innermost values in 11 aggregates.
const (
	DefaultMaxDepth = 16       // aggregates around a value
	DefaultMaxBulk  = 64 << 20 // bytes in a string
	DefaultMaxElems = 1 << 20  // elements an aggregate declares
)

// Limits bound what Read accepts, so that a server cannot make it recurse
// or allocate without limit. Past a small fixed amount, what Read
// allocates grows with the bytes that actually arrive, never with a length
// a header merely declares. A zero field takes its default.
type Limits struct {
	// MaxDepth is how many aggregates a reply may be nested in: 0, a
	// top-level reply, is always allowed. Default DefaultMaxDepth.
	MaxDepth int
	// MaxBulk is the most bytes of one string, bulk or on a line (a
	// simple string, an error). Default DefaultMaxBulk.
	MaxBulk int
	// MaxElems is the most elements one aggregate may declare (pairs, for
	// a map). Default DefaultMaxElems.
	MaxElems int
}

// withDefaults returns l with its zero fields set to their defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxBulk <= 0 {
		l.MaxBulk = DefaultMaxBulk
	}
	if l.MaxElems <= 0 {
		l.MaxElems = DefaultMaxElems
	}
	return l
}

// ProtocolError is what Read returns for a reply that breaks the protocol
// or one of its Limits. The stream is out of step after it: close the
// connection.
type ProtocolError struct {
	// Msg says what was wrong.
	Msg string
}

// Error implements error.
func (e *ProtocolError) Error() string { return "resp: " + e.Msg }

// protoErr returns a ProtocolError about line (quoted, cut to 64 bytes).
func protoErr(msg string, line []byte) error {
	if len(line) > 64 {
		line = line[:64]
	}
	return &ProtocolError{Msg: msg + " " + strconv.Quote(string(line))}
}

// What Read allocates ahead of the bytes that arrive: the bytes of a bulk
// string, the elements of an aggregate.
const (
	bulkAhead  = 64 << 10
	elemsAhead = 256
)

// Read reads one reply from rd within lim. It returns io.EOF when rd ends
// before the reply starts and io.ErrUnexpectedEOF when it ends within; any
// other read error as it comes; a *ProtocolError for a malformed reply.
func Read(rd *bufio.Reader, lim Limits) (Value, error) {
	var v Value
	if err := read(rd, lim.withDefaults(), 0, &v); err != nil {
		return Value{}, err
	}
	return v, nil
}

// Skip reads one reply from rd within lim and drops it: it checks the
// reply and fails as Read would, but allocates nothing when the reply's
// lines fit in rd's buffer (strings of any length are discarded as they
// arrive). It is for readers that want only part of a reply, such as a
// load generator's.
func Skip(rd *bufio.Reader, lim Limits) error {
	return read(rd, lim.withDefaults(), 0, nil)
}

// ReadLine reads the first line of a reply, which says its type, without
// its CRLF; the slice is valid until the next read from rd. With SkipRest
// it lets a reader look at a reply's type before deciding to skip it.
func ReadLine(rd *bufio.Reader, lim Limits) ([]byte, error) {
	line, err := readLine(rd, lim.withDefaults().MaxBulk)
	if err == nil && len(line) == 0 {
		return nil, &ProtocolError{Msg: "empty reply line"}
	}
	return line, err
}

// SkipRest drops the rest of the reply whose first line, read by ReadLine,
// is line, as Skip does.
func SkipRest(rd *bufio.Reader, lim Limits, line []byte) error {
	return parse(rd, lim.withDefaults(), 0, line, nil)
}

// read reads one reply nested in depth aggregates into v; with v nil, it
// checks the reply without keeping it.
func read(rd *bufio.Reader, lim Limits, depth int, v *Value) error {
	if depth > lim.MaxDepth {
		return &ProtocolError{Msg: "reply nested deeper than " + strconv.Itoa(lim.MaxDepth)}
	}
	line, err := readLine(rd, lim.MaxBulk)
	if err != nil {
		return err
	}
	if len(line) == 0 {
		return &ProtocolError{Msg: "empty reply line"}
	}
	return parse(rd, lim, depth, line, v)
}

// parse reads the rest of a reply nested in depth aggregates whose first
// line is line into v; with v nil, it checks the reply without keeping it.
func parse(rd *bufio.Reader, lim Limits, depth int, line []byte, v *Value) error {
	kind, text := Kind(line[0]), line[1:]
	keep := v != nil
	if keep {
		v.Kind = kind
	}
	switch kind {
	case SimpleString, SimpleError:
		if keep {
			v.Str = string(text)
		}
	case Integer:
		n, ok := ParseInt(text)
		if !ok {
			return protoErr("integer", line)
		}
		if keep {
			v.Int = n
		}
	case Null:
		if len(text) != 0 {
			return protoErr("null", line)
		}
	case Double:
		if _, err := strconv.ParseFloat(string(text), 64); err != nil && !errors.Is(err, strconv.ErrRange) {
			return protoErr("double", line)
		}
		if keep {
			v.Str = string(text)
		}
	case Boolean:
		switch string(text) {
		case "t":
			if keep {
				v.Int = 1
			}
		case "f":
		default:
			return protoErr("boolean", line)
		}
	case BigNumber:
		if !isBigNumber(text) {
			return protoErr("big number", line)
		}
		if keep {
			v.Str = string(text)
		}
	case BulkString, BulkError, VerbatimString, Array, Map, Set, Push:
		return readCounted(rd, lim, depth, kind, line, v)
	default:
		return protoErr("unknown reply type", line)
	}
	return nil
}

// readCounted reads the rest of a bulk string (bulk error, verbatim
// string) or an aggregate whose header line, holding its length, is line,
// into v; with v nil, it checks the rest without keeping it.
func readCounted(rd *bufio.Reader, lim Limits, depth int, kind Kind, line []byte, v *Value) error {
	limit, nullable := lim.MaxBulk, kind == BulkString
	aggregate := kind == Array || kind == Map || kind == Set || kind == Push
	if aggregate {
		limit, nullable = lim.MaxElems, kind == Array
	}
	n, err := length(line, limit, nullable)
	switch {
	case err != nil:
		return err
	case n < 0:
		if v != nil {
			v.Null = true
		}
		return nil
	case aggregate:
		return readElems(rd, lim, depth, kind, n, v)
	case v == nil:
		return skipBulk(rd, n, kind == VerbatimString)
	}
	if v.Str, err = readBulk(rd, n); err != nil {
		return err
	}
	if kind == VerbatimString && (len(v.Str) < 4 || v.Str[3] != ':') {
		return protoErr("verbatim string without a format", []byte(v.Str))
	}
	return nil
}

// readElems reads the n elements (pairs, for a map) of an aggregate nested
// in depth others into v; with v nil, it checks them without keeping them.
func readElems(rd *bufio.Reader, lim Limits, depth int, kind Kind, n int, v *Value) error {
	if kind == Map {
		n *= 2
	}
	if v != nil {
		v.Elems = make([]Value, 0, min(n, elemsAhead))
	}
	for range n {
		var e *Value
		if v != nil {
			v.Elems = append(v.Elems, Value{})
			e = &v.Elems[len(v.Elems)-1]
		}
		err := read(rd, lim, depth+1, e)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// length parses the count of a bulk or aggregate header line: -1 (a null,
// when nullable), or 0 to limit.
func length(line []byte, limit int, nullable bool) (int, error) {
	n64, ok := ParseInt(line[1:])
	n := int(n64)
	switch {
	case !ok, n < -1, n == -1 && !nullable:
		return 0, protoErr("length", line)
	case n > limit:
		return 0, protoErr("length over the limit of "+strconv.Itoa(limit)+":", line)
	}
	return n, nil
}

// readLine reads one CRLF-terminated line of at most limit bytes and
// returns it without the CRLF. The slice is valid until the next read from
// rd.
func readLine(rd *bufio.Reader, limit int) ([]byte, error) {
	var long []byte // a line longer than rd's buffer
	for {
		frag, err := rd.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = append(long, frag...)
			if len(long) > limit+2 {
				return nil, protoErr("line longer than "+strconv.Itoa(limit)+" bytes:", long)
			}
			continue
		}
		if err != nil {
			if err == io.EOF && (len(frag) > 0 || len(long) > 0) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		line := frag
		if long != nil {
			line = append(long, frag...)
		}
		if len(line) > limit+2 {
			return nil, protoErr("line longer than "+strconv.Itoa(limit)+" bytes:", line)
		}
		if len(line) < 2 || line[len(line)-2] != '\r' {
			return nil, protoErr("line not ended by CRLF", line)
		}
		return line[:len(line)-2], nil
	}
}

// skipBulk discards n bytes and the CRLF after them, checking what Read
// checks of a bulk string (a verbatim string's format) without keeping it.
func skipBulk(rd *bufio.Reader, n int, verbatim bool) error {
	if verbatim {
		head, err := rd.Peek(min(n, 4))
		if err != nil {
			return unexpected(err)
		}
		if len(head) < 4 || head[3] != ':' {
			return protoErr("verbatim string without a format", head)
		}
	}
	if _, err := rd.Discard(n); err != nil {
		return unexpected(err)
	}
	crlf, err := rd.Peek(2)
	if err != nil {
		return unexpected(err)
	}
	if crlf[0] != '\r' || crlf[1] != '\n' {
		return protoErr("bulk string not ended by CRLF", crlf)
	}
	_, err = rd.Discard(2)
	return err
}

// unexpected is err, but io.ErrUnexpectedEOF for io.EOF: the reply had
// begun.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ParseInt parses a decimal integer (an optional sign, then digits) that
// fits in an int64, as strconv.ParseInt(s, 10, 64) would, but from bytes
// and several times faster: integers are most of what a limiter replies.
func ParseInt(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0') // 19 digits cannot overflow a uint64
	}
	switch {
	case !neg && n > math.MaxInt64, neg && n > math.MaxInt64+1:
		return 0, false
	case neg:
		return -int64(n), true
	}
	return int64(n), true
}

// isBigNumber reports whether text is an optional sign and then digits.
func isBigNumber(text []byte) bool {
	if len(text) > 0 && (text[0] == '-' || text[0] == '+') {
		text = text[1:]
	}
	for _, c := range text {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(text) > 0
}

// readBulk reads n bytes and the CRLF after them, allocating as they
// arrive (at most doubling what came) rather than all that n declares.
func readBulk(rd *bufio.Reader, n int) (string, error) {
	want := n + 2
	buf := make([]byte, 0, min(want, bulkAhead))
	for len(buf) < want {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(want-len(buf), len(buf)))
		}
		m, err := io.ReadFull(rd, buf[len(buf):min(cap(buf), want)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return "", err
		}
	}
	if !bytes.HasSuffix(buf, []byte("\r\n")) {
		return "", protoErr("bulk string not ended by CRLF", buf[max(0, len(buf)-8):])
	}
	return string(buf[:n]), nil
}
