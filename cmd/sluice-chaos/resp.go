package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// respConn is a minimal RESP2 client: one request at a time, each with its
// own deadline, so that the recorder knows exactly when a request was sent
// and when its reply came (or did not).
type respConn struct {
	conn net.Conn
	rd   *bufio.Reader
	wr   *bufio.Writer
}

// dialRESP connects to addr.
func dialRESP(addr string, timeout time.Duration) (*respConn, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return &respConn{conn: conn, rd: bufio.NewReader(conn), wr: bufio.NewWriter(conn)}, nil
}

// Close closes the connection.
func (c *respConn) Close() error { return c.conn.Close() }

// reply is one RESP reply: an error, a simple or bulk string, an integer,
// nil, or an array of replies.
type reply struct {
	err   string // "-" reply text, without the dash
	str   string
	num   int64
	isNum bool
	isNil bool
	arr   []reply
	isArr bool
}

// ints returns the reply as integers when it is an array of integers.
func (r reply) ints() ([]int64, bool) {
	if !r.isArr {
		return nil, false
	}
	out := make([]int64, len(r.arr))
	for i, e := range r.arr {
		if !e.isNum {
			return nil, false
		}
		out[i] = e.num
	}
	return out, true
}

// strings returns the reply as strings when it is an array of strings.
func (r reply) strings() []string {
	out := make([]string, 0, len(r.arr))
	for _, e := range r.arr {
		if e.isNum {
			out = append(out, strconv.FormatInt(e.num, 10))
		} else {
			out = append(out, e.str)
		}
	}
	return out
}

// String renders the reply for logs and reports.
func (r reply) String() string {
	switch {
	case r.err != "":
		return "-" + r.err
	case r.isNil:
		return "nil"
	case r.isNum:
		return strconv.FormatInt(r.num, 10)
	case r.isArr:
		parts := make([]string, len(r.arr))
		for i, e := range r.arr {
			parts[i] = e.String()
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return strconv.Quote(r.str)
}

// do sends one command and reads its reply within timeout. Any error
// leaves the connection unusable: the caller closes it.
func (c *respConn) do(timeout time.Duration, args ...string) (reply, error) {
	_ = c.conn.SetDeadline(time.Now().Add(timeout))
	fmt.Fprintf(c.wr, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c.wr, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := c.wr.Flush(); err != nil {
		return reply{}, fmt.Errorf("write: %w", err)
	}
	r, err := readReply(c.rd, 0)
	if err != nil {
		return reply{}, fmt.Errorf("read: %w", err)
	}
	return r, nil
}

// readReply parses one reply (RESP2, plus RESP3's null and map, which the
// server does not send to a RESP2 client but costs nothing to accept).
func readReply(rd *bufio.Reader, depth int) (reply, error) {
	if depth > 8 {
		return reply{}, errors.New("reply nested too deep")
	}
	line, err := rd.ReadString('\n')
	if err != nil {
		return reply{}, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return reply{}, errors.New("empty reply line")
	}
	switch line[0] {
	case '-':
		return reply{err: line[1:]}, nil
	case '+':
		return reply{str: line[1:]}, nil
	case ':':
		n, err := strconv.ParseInt(line[1:], 10, 64)
		if err != nil {
			return reply{}, fmt.Errorf("integer reply %q: %w", line, err)
		}
		return reply{num: n, isNum: true}, nil
	case '_':
		return reply{isNil: true}, nil
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n > 64<<20 {
			return reply{}, fmt.Errorf("bulk length %q", line)
		}
		if n < 0 {
			return reply{isNil: true}, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return reply{}, err
		}
		return reply{str: string(buf[:n])}, nil
	case '*', '%':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n > 1<<20 {
			return reply{}, fmt.Errorf("array length %q", line)
		}
		if n < 0 {
			return reply{isNil: true}, nil
		}
		if line[0] == '%' {
			n *= 2
		}
		r := reply{isArr: true, arr: make([]reply, n)}
		for i := range r.arr {
			if r.arr[i], err = readReply(rd, depth+1); err != nil {
				return reply{}, err
			}
		}
		return r, nil
	}
	return reply{}, fmt.Errorf("unexpected reply line %q", line)
}

// command runs one command on a fresh connection (for control requests:
// RAFT.STATUS, DEBUG DIGEST, final reads).
func command(addr string, timeout time.Duration, args ...string) (reply, error) {
	c, err := dialRESP(addr, timeout)
	if err != nil {
		return reply{}, err
	}
	defer c.Close()
	return c.do(timeout, args...)
}

// raftStatus returns a node's RAFT.STATUS fields.
func raftStatus(addr string, timeout time.Duration) (map[string]string, error) {
	r, err := command(addr, timeout, "RAFT.STATUS")
	if err != nil {
		return nil, err
	}
	if r.err != "" {
		return nil, fmt.Errorf("RAFT.STATUS: %s", r.err)
	}
	s := r.strings()
	m := make(map[string]string, len(s)/2)
	for i := 0; i+1 < len(s); i += 2 {
		m[s[i]] = s[i+1]
	}
	return m, nil
}
