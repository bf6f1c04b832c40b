package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// limits bound the replies the load generator accepts: generous, since it
// talks to servers it started itself, but finite.
var limits = respwire.Limits{MaxBulk: 512 << 20, MaxElems: 1 << 24}

// dial connects to addr with the large buffers a pipelined load wants.
func dial(addr string) (*respwire.Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c := respwire.NewConn(nc)
	c.Reader, c.Limits = bufio.NewReaderSize(nc, 64<<10), limits
	return c, nil
}

// doAt runs one command on a fresh connection to addr; an error reply is
// an error.
func doAt(addr string, args ...string) (respwire.Value, error) {
	v, err := respwire.DoAt(addr, time.Minute, args...)
	if err == nil && v.Error() != "" {
		err = fmt.Errorf("%s: %s", args[0], v.Error())
	}
	return v, err
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

// readDecision reads one reply and keeps only its decision, without
// allocating: the first integer of an array, or an integer. A bulk string
// (an ECHO, see EchoDialect) is reported as Allowed 1; any other well-formed
// reply is skipped and reported as Allowed 0.
func readDecision(rd *bufio.Reader) (Decision, error) {
	l, err := respwire.ReadLine(rd, limits)
	if err != nil {
		return Decision{}, err
	}
	switch respwire.Kind(l[0]) {
	case respwire.Integer:
		n, ok := respwire.ParseInt(l[1:])
		if !ok {
			return Decision{}, fmt.Errorf("bad integer %q", l)
		}
		return Decision{Allowed: n}, nil
	case respwire.SimpleError:
		return Decision{Err: true, Msg: string(l[1:])}, nil
	case respwire.Array:
		n, ok := respwire.ParseInt(l[1:])
		if !ok || n < -1 {
			return Decision{}, fmt.Errorf("bad length %q", l)
		}
		if n <= 0 {
			return Decision{}, nil
		}
		first, err := readDecision(rd)
		for i := int64(1); i < n && err == nil; i++ {
			err = respwire.Skip(rd, limits)
		}
		return first, err
	}
	if err := respwire.SkipRest(rd, limits, l); err != nil {
		return Decision{}, err
	}
	if respwire.Kind(l[0]) == respwire.BulkString && !bytes.Equal(l, []byte("$-1")) {
		return Decision{Allowed: 1}, nil
	}
	return Decision{}, nil
}
