package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// respConn is a RESP client: one request at a time, each with its own
// deadline, so that the recorder knows exactly when a request was sent and
// when its reply came (or did not).
type respConn struct {
	*respwire.Conn
}

// dialRESP connects to addr. The replies it takes nest at most 8 deep:
// the workload's and the control commands' need 1.
func dialRESP(addr string, timeout time.Duration) (*respConn, error) {
	c, err := respwire.Dial(addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c.Limits.MaxDepth = 8
	return &respConn{c}, nil
}

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
	v, err := c.Do(timeout, args...)
	if err != nil {
		return reply{}, err
	}
	return fromWire(v)
}

// fromWire converts a reply as read into the workload's view: RESP2's
// types, plus RESP3's null and map (a map as its flattened pairs), which
// the server does not send to a RESP2 client but cost nothing to accept.
func fromWire(v respwire.Value) (reply, error) {
	switch {
	case v.IsNull():
		return reply{isNil: true}, nil
	case v.Kind == respwire.SimpleError:
		return reply{err: v.Str}, nil
	case v.Kind == respwire.SimpleString, v.Kind == respwire.BulkString:
		return reply{str: v.Str}, nil
	case v.Kind == respwire.Integer:
		return reply{num: v.Int, isNum: true}, nil
	case v.Kind == respwire.Array, v.Kind == respwire.Map:
		r := reply{isArr: true, arr: make([]reply, len(v.Elems))}
		for i, e := range v.Elems {
			var err error
			if r.arr[i], err = fromWire(e); err != nil {
				return reply{}, err
			}
		}
		return r, nil
	}
	return reply{}, fmt.Errorf("read: unexpected reply %.64s", v)
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
