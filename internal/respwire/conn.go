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

// Send writes one command.
func (c *Conn) Send(args ...string) error {
	c.out = AppendCommand(c.out[:0], args...)
	_, err := c.Conn.Write(c.out)
	return err
}

// ReadReply reads one reply within c.Limits.
func (c *Conn) ReadReply() (Value, error) { return Read(c.Reader, c.Limits) }

// Do sends one command and reads its reply, both within timeout of now.
// After an error the connection is out of step: close it.
func (c *Conn) Do(timeout time.Duration, args ...string) (Value, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if err := c.Send(args...); err != nil {
		return Value{}, fmt.Errorf("write: %w", err)
	}
	v, err := c.ReadReply()
	if err != nil {
		return Value{}, fmt.Errorf("read: %w", err)
	}
	return v, nil
}
