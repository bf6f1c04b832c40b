package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
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

// limits bound the replies the client accepts: generous, since it talks to
// servers it started itself, but finite.
var limits = respwire.Limits{MaxBulk: 512 << 20, MaxElems: 1 << 24}

// readErr wraps an error of respwire: a malformed reply as ErrProtocol,
// anything else as a read error.
func readErr(err error) error {
	var pe *respwire.ProtocolError
	if errors.As(err, &pe) {
		return fmt.Errorf("%w: %s", ErrProtocol, pe.Msg)
	}
	return fmt.Errorf("read: %w", err)
}

// ReadDecision reads one reply and keeps only its decision, without
// allocating: the first integer of an array, or an integer. A bulk string
// (an ECHO, see EchoDialect) is reported as Allowed 1; any other well-formed
// reply is skipped and reported as Allowed 0.
func (c *Conn) ReadDecision() (Decision, error) {
	l, err := respwire.ReadLine(c.br, limits)
	if err != nil {
		return Decision{}, readErr(err)
	}
	switch respwire.Kind(l[0]) {
	case respwire.Integer:
		n, ok := respwire.ParseInt(l[1:])
		if !ok {
			return Decision{}, fmt.Errorf("%w: bad integer %q", ErrProtocol, l)
		}
		return Decision{Allowed: n}, nil
	case respwire.SimpleError:
		return Decision{Err: true, Msg: string(l[1:])}, nil
	case respwire.BulkString:
		if err := respwire.SkipRest(c.br, limits, l); err != nil {
			return Decision{}, readErr(err)
		}
		if bytes.Equal(l, []byte("$-1")) {
			return Decision{}, nil // a null
		}
		return Decision{Allowed: 1}, nil
	case respwire.Array:
		n, ok := respwire.ParseInt(l[1:])
		if !ok || n < -1 {
			return Decision{}, fmt.Errorf("%w: bad length %q", ErrProtocol, l)
		}
		if n <= 0 {
			return Decision{}, nil
		}
		first, err := c.ReadDecision()
		if err != nil {
			return Decision{}, err
		}
		for range n - 1 {
			if err := respwire.Skip(c.br, limits); err != nil {
				return Decision{}, readErr(err)
			}
		}
		return first, nil
	default:
		if err := respwire.SkipRest(c.br, limits, l); err != nil {
			return Decision{}, readErr(err)
		}
		return Decision{}, nil
	}
}

// ReadValue reads one reply in full. A RESP3 bulk error comes back as an
// error reply ('-'), a RESP3 null with Null set.
func (c *Conn) ReadValue() (Value, error) {
	w, err := respwire.Read(c.br, limits)
	if err != nil {
		return Value{}, readErr(err)
	}
	return fromWire(w), nil
}

// fromWire is a reply read by respwire as a Value.
func fromWire(w respwire.Value) Value {
	v := Value{Kind: byte(w.Kind), Str: w.Str, Int: w.Int, Null: w.IsNull()}
	if w.Kind == respwire.BulkError {
		v.Kind = '-'
	}
	if w.Elems != nil {
		v.Array = make([]Value, len(w.Elems))
		for i, e := range w.Elems {
			v.Array[i] = fromWire(e)
		}
	}
	return v
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
