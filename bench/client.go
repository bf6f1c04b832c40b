package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// ErrProtocol is wrapped by every error about a malformed reply.
var ErrProtocol = errors.New("resp protocol error")

// ReplyError is an error reply (-ERR ..., -WRONGTYPE ...) from the server.
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// Value is one RESP reply, parsed in full. Kind is the type byte: '+' simple
// string, '-' error, ':' integer, '$' bulk string, '*' array, and for RESP3
// '_' null, ',' double, '#' boolean, '%' map (Array holds key, value, ...),
// '~' set. A nil bulk string or array has Null set.
type Value struct {
	Kind  byte
	Str   string
	Int   int64
	Array []Value
	Null  bool
}

// Decision is what the load loop keeps of one limiter reply: the first
// integer of an array reply (sluice's "allowed"), or the integer itself (the
// anchor Lua script's 1 or 0). Err is set, and Allowed meaningless, for an
// error reply.
type Decision struct {
	Allowed int64
	Err     bool
	Msg     string // the error text, for an error reply
}

// Conn is a minimal pipelined RESP2 client connection: append any number of
// commands, Flush them in one write, then read as many replies. It is not
// safe for concurrent use.
type Conn struct {
	nc  net.Conn
	br  *bufio.Reader
	out []byte
	num []byte
}

// Dial connects to a RESP server at addr (host:port).
func Dial(ctx context.Context, addr string) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return NewConn(nc), nil
}

// NewConn wraps an established connection.
func NewConn(nc net.Conn) *Conn {
	return &Conn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), out: make([]byte, 0, 64<<10)}
}

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

// SetDeadline sets the read and write deadline of the connection.
func (c *Conn) SetDeadline(t time.Time) error { return c.nc.SetDeadline(t) }

// Buffered is the number of bytes appended and not yet flushed.
func (c *Conn) Buffered() int { return len(c.out) }

// AppendRaw appends bytes that already are a RESP command.
func (c *Conn) AppendRaw(b []byte) { c.out = append(c.out, b...) }

// Append appends one command, given as its arguments.
func (c *Conn) Append(args ...string) {
	c.out = AppendCommand(c.out, args...)
}

// AppendCommand appends the RESP array encoding of args to b.
func AppendCommand(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = AppendBulk(b, a)
	}
	return b
}

// AppendArrayHeader appends "*n\r\n".
func AppendArrayHeader(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// AppendBulk appends s as a bulk string.
func AppendBulk[S string | []byte](b []byte, s S) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendBulkInt appends the decimal form of n as a bulk string.
func AppendBulkInt(b []byte, n int64) []byte {
	var tmp [24]byte
	return AppendBulk(b, strconv.AppendInt(tmp[:0], n, 10))
}

// Flush writes every appended command.
func (c *Conn) Flush() error {
	if len(c.out) == 0 {
		return nil
	}
	_, err := c.nc.Write(c.out)
	c.out = c.out[:0]
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// Do sends one command and reads its reply. An error reply is returned as a
// ReplyError. The context's deadline, if any, bounds the exchange.
func (c *Conn) Do(ctx context.Context, args ...string) (Value, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.nc.SetDeadline(dl)
		defer c.nc.SetDeadline(time.Time{})
	}
	c.Append(args...)
	if err := c.Flush(); err != nil {
		return Value{}, err
	}
	v, err := c.ReadValue()
	if err != nil {
		return Value{}, err
	}
	if v.Kind == '-' {
		return v, ReplyError(v.Str)
	}
	return v, nil
}

// line reads one CRLF-terminated line and returns it without the CRLF. The
// slice is valid until the next read.
func (c *Conn) line() ([]byte, error) {
	l, err := c.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, c.br.Size())
		}
		return nil, fmt.Errorf("read: %w", err)
	}
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return nil, fmt.Errorf("%w: bad line %q", ErrProtocol, l)
	}
	return l[:len(l)-2], nil
}

// parseInt parses a decimal integer without allocating.
func parseInt(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("%w: empty integer", ErrProtocol)
	}
	neg := false
	if b[0] == '-' || b[0] == '+' {
		neg = b[0] == '-'
		b = b[1:]
		if len(b) == 0 {
			return 0, fmt.Errorf("%w: bad integer", ErrProtocol)
		}
	}
	if len(b) > 19 {
		return 0, fmt.Errorf("%w: integer %q too long", ErrProtocol, b)
	}
	var n int64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, fmt.Errorf("%w: bad integer %q", ErrProtocol, b)
		}
		n = n*10 + int64(ch-'0')
	}
	if neg {
		n = -n
	}
	return n, nil
}

// ReadDecision reads one reply and keeps only its decision, without
// allocating: the first integer of an array, or an integer. A bulk string
// (an ECHO, see EchoDialect) is reported as Allowed 1; any other well-formed
// reply is skipped and reported as Allowed 0.
func (c *Conn) ReadDecision() (Decision, error) {
	l, err := c.line()
	if err != nil {
		return Decision{}, err
	}
	switch l[0] {
	case ':':
		n, err := parseInt(l[1:])
		return Decision{Allowed: n}, err
	case '-':
		return Decision{Err: true, Msg: string(l[1:])}, nil
	case '$':
		if err := c.skipRest(l); err != nil || bytes.HasPrefix(l, []byte("$-")) {
			return Decision{}, err
		}
		return Decision{Allowed: 1}, nil
	case '*':
		n, err := parseInt(l[1:])
		if err != nil || n <= 0 {
			return Decision{}, err
		}
		first, err := c.ReadDecision()
		if err != nil {
			return Decision{}, err
		}
		for i := int64(1); i < n; i++ {
			if err := c.skip(); err != nil {
				return Decision{}, err
			}
		}
		return first, nil
	default:
		return Decision{}, c.skipRest(l)
	}
}

// skip reads and discards one reply.
func (c *Conn) skip() error {
	l, err := c.line()
	if err != nil {
		return err
	}
	return c.skipRest(l)
}

// skipRest discards the rest of a reply whose first line is l.
func (c *Conn) skipRest(l []byte) error {
	switch l[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return nil
	case '$', '=', '!':
		n, err := parseInt(l[1:])
		if err != nil || n < 0 {
			return err
		}
		if _, err := c.br.Discard(int(n) + 2); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		return nil
	case '*', '~', '>', '%', '|':
		n, err := parseInt(l[1:])
		if err != nil || n < 0 {
			return err
		}
		if l[0] == '%' || l[0] == '|' {
			n *= 2
		}
		for i := int64(0); i < n; i++ {
			if err := c.skip(); err != nil {
				return err
			}
		}
		return nil
	default:
		return fmt.Errorf("%w: unknown reply type %q", ErrProtocol, l[0])
	}
}

// maxBulk caps the bulk strings ReadValue accepts, so that a broken server
// cannot make the client allocate without bound.
const maxBulk = 512 << 20

// ReadValue reads one reply in full.
func (c *Conn) ReadValue() (Value, error) {
	l, err := c.line()
	if err != nil {
		return Value{}, err
	}
	v := Value{Kind: l[0]}
	switch l[0] {
	case '+', '-', ',', '(':
		v.Str = string(l[1:])
	case ':':
		v.Int, err = parseInt(l[1:])
	case '_':
		v.Null = true
	case '#':
		v.Int = 0
		if len(l) > 1 && l[1] == 't' {
			v.Int = 1
		}
	case '$', '=', '!':
		var n int64
		n, err = parseInt(l[1:])
		if err != nil {
			return v, err
		}
		if n < 0 {
			v.Null = true
			return v, nil
		}
		if n > maxBulk {
			return v, fmt.Errorf("%w: bulk of %d bytes", ErrProtocol, n)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.br, buf); err != nil {
			return v, fmt.Errorf("read: %w", err)
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return v, fmt.Errorf("%w: bulk not followed by CRLF", ErrProtocol)
		}
		v.Str = string(buf[:n])
		if l[0] == '!' {
			v.Kind = '-'
		}
	case '*', '~', '>', '%', '|':
		var n int64
		n, err = parseInt(l[1:])
		if err != nil {
			return v, err
		}
		if n < 0 {
			v.Null = true
			return v, nil
		}
		if l[0] == '%' || l[0] == '|' {
			n *= 2
		}
		if n > 1<<24 {
			return v, fmt.Errorf("%w: aggregate of %d elements", ErrProtocol, n)
		}
		v.Array = make([]Value, 0, n)
		for i := int64(0); i < n; i++ {
			e, err := c.ReadValue()
			if err != nil {
				return v, err
			}
			v.Array = append(v.Array, e)
		}
	default:
		return v, fmt.Errorf("%w: unknown reply type %q", ErrProtocol, l[0])
	}
	return v, err
}

// Ints is v as a list of integers: an integer reply is a list of one; an
// array must hold only integers.
func (v Value) Ints() ([]int64, error) {
	switch v.Kind {
	case ':':
		return []int64{v.Int}, nil
	case '*':
		out := make([]int64, len(v.Array))
		for i, e := range v.Array {
			if e.Kind != ':' {
				return nil, fmt.Errorf("%w: element %d is %q, not an integer", ErrProtocol, i, e.Kind)
			}
			out[i] = e.Int
		}
		return out, nil
	case '-':
		return nil, ReplyError(v.Str)
	}
	return nil, fmt.Errorf("%w: reply %q is not integers", ErrProtocol, v.Kind)
}

// String is the reply as redis-cli would roughly print it.
func (v Value) String() string {
	switch {
	case v.Null:
		return "(nil)"
	case v.Kind == ':':
		return strconv.FormatInt(v.Int, 10)
	case v.Array != nil || v.Kind == '*':
		s := "["
		for i, e := range v.Array {
			if i > 0 {
				s += " "
			}
			s += e.String()
		}
		return s + "]"
	}
	return v.Str
}
