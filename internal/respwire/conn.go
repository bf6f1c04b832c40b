package respwire

import (
	"bufio"
	"fmt"
	"net"
	"time"
)

// Conn is a client connection that sends commands and reads replies, one
// at a time; it is not safe for concurrent use. The embedded net.Conn is
// there for deadlines, raw writes and Close: reading from it directly
// skips what Reader has buffered.
type Conn struct {
	net.Conn
	// Reader buffers what the server sends; replies are read from it.
	Reader *bufio.Reader
	// Limits bound the replies ReadReply accepts.
	Limits Limits

	out []byte // the command being sent, reused
}

// NewConn returns a Conn over nc with default Limits.
func NewConn(nc net.Conn) *Conn {
	return &Conn{Conn: nc, Reader: bufio.NewReader(nc)}
}

// Dial connects to addr over TCP within timeout.
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return NewConn(nc), nil
}

// Send writes one command (and any appended before it).
func (c *Conn) Send(args ...string) error {
	c.Append(args...)
	return c.Flush()
}

// ReadReply reads one reply within c.Limits.
func (c *Conn) ReadReply() (Value, error) { return Read(c.Reader, c.Limits) }

// Do sends one command and reads its reply, both within timeout of now.
// After an error the connection is out of step: close it.
func (c *Conn) Do(timeout time.Duration, args ...string) (Value, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if err := c.Send(args...); err != nil {
		return Value{}, err
	}
	v, err := c.ReadReply()
	if err != nil {
		return Value{}, fmt.Errorf("read: %w", err)
	}
	return v, nil
}

// Append adds one command to the batch that Flush sends: pipelining.
func (c *Conn) Append(args ...string) { c.out = AppendCommand(c.out, args...) }

// AppendRaw adds bytes that already are one or more RESP commands.
func (c *Conn) AppendRaw(b []byte) { c.out = append(c.out, b...) }

// Flush writes the commands appended since the last Flush in one write.
func (c *Conn) Flush() error {
	if len(c.out) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.out)
	c.out = c.out[:0]
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// DoAt runs one command on a fresh connection to addr, dial and exchange
// each within timeout. An error reply is a Value, not an error.
func DoAt(addr string, timeout time.Duration, args ...string) (Value, error) {
	c, err := Dial(addr, timeout)
	if err != nil {
		return Value{}, fmt.Errorf("dial %s: %w", addr, err)
	}
	defer c.Close()
	return c.Do(timeout, args...)
}
