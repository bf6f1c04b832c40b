package resp

import (
	"bytes"
	"errors"
	"io"

	"github.com/tidwall/redcon"
)

// The request reader.
//
// Each connection reads its requests through a reqReader on top of its
// GuardConn. The reader keeps one buffer and parses every complete command
// in it into arguments that are sub-slices of that buffer, listed in one
// argument slice that is reused from read to read: a steady client costs no
// allocation per command or per argument (redcon's reader, which sluice used
// before, copies every command and allocates its argument slices). The
// arguments are valid until the next read, that is, for as long as the
// pipeline they belong to runs; nothing may keep them after that (the
// Executor does not keep its ops, MULTI copies what it queues, and the rule
// cache and the tracking tables copy what they remember).
//
// Framing. The guard in front has checked every byte the reader sees: a
// read ends exactly at a command boundary, or holds part of one command and
// fills the buffer (guard.go, "delivery policy"); multibulk headers are
// well formed and within the limits. The reader checks the framing again
// anyway, so that it is safe on its own: anything malformed ends the
// connection with a protocol error, never a panic or an unbounded loop.
// Inline commands (a line not starting with '*', rare and only typed by
// hand) are split by redcon's tokenizer (redcon.Parse), which allocates;
// the guard mirrors that tokenizer and bounds its cost.
//
// Memory. The buffer starts at reqBufSize bytes. A read that ends inside a
// command which fills the whole buffer doubles it, so an S-byte command
// costs O(log S) reads and parses and at most about 2*S of buffer, and the
// guard bounds S (MaxQueryBuffer). Once the buffer is drained, one larger
// than maxKeptReqBuf is dropped for a new one of reqBufSize. The argument
// slice is dropped likewise when a command had more than maxKeptArgs
// arguments.

const (
	// reqBufSize is the read buffer of a connection: a read takes up to
	// this many bytes, as the guard reads at most guardChunk at once.
	reqBufSize = guardChunk
	// maxKeptReqBuf is the largest read buffer a connection keeps once it
	// is drained.
	maxKeptReqBuf = 64 << 10
	// maxKeptArgs is the most argument slots a connection keeps between
	// pipelines.
	maxKeptArgs = 4096
	// maxEmptyReads is how many reads in a row may return nothing before
	// the connection is given up (as bufio does).
	maxEmptyReads = 100
	// maxReqNumDigits bounds the digits of `*N` and `$L`, as the guard.
	maxReqNumDigits = maxHeaderDigits
)

// reqProtocolError is a framing error the reader found itself, which the
// guard in front makes unreachable. Unlike the guard's *ProtocolError, its
// reply has not been written: the connection's loop writes it, then closes.
type reqProtocolError struct{ reason string }

// Error returns "Protocol error: <reason>", the reply text without "ERR ".
func (e *reqProtocolError) Error() string { return "Protocol error: " + e.reason }

// errReqFraming is the reader's error for a malformed multibulk request.
var errReqFraming = &reqProtocolError{reason: "invalid multibulk length"}

// reqReader parses RESP requests, multibulk or inline, from rd into
// commands whose arguments point into its buffer. It is used by one
// goroutine.
type reqReader struct {
	rd    io.Reader
	buf   []byte // buf[start:end] is read and not yet parsed
	start int
	end   int
	rerr  error // rd's error, returned once the commands before it are
	perr  error // a framing error, returned once the commands before it are
	empty int   // consecutive reads that returned nothing and no error

	argv [][]byte         // the arguments of the commands of the last read
	cmds []redcon.Command // the last read's commands; their Args point into argv
	ends []int            // cmds[i]'s arguments are argv[ends[i-1]:ends[i]]
}

// newReqReader returns a reader of rd.
func newReqReader(rd io.Reader) *reqReader {
	return &reqReader{rd: rd}
}

// next returns the complete commands of the next read (at least one), or
// the error that ended the connection: io.EOF, the connection's error, the
// guard's *ProtocolError (its reply written already), or the reader's own
// *reqProtocolError (not written). The commands and their arguments are
// valid until the next call.
func (r *reqReader) next() ([]redcon.Command, error) {
	r.cmds, r.argv, r.ends = r.cmds[:0], r.argv[:0], r.ends[:0]
	if cap(r.argv) > maxKeptArgs {
		r.argv, r.ends, r.cmds = nil, nil, nil
	}
	if r.perr != nil {
		return nil, r.perr
	}
	for {
		if err := r.parse(); err != nil {
			r.perr = err
			if len(r.ends) == 0 {
				return nil, err
			}
		}
		if len(r.ends) > 0 {
			r.slice()
			return r.cmds, nil
		}
		if r.rerr != nil {
			err := r.rerr
			r.rerr = nil
			return nil, err
		}
		if err := r.fill(); err != nil {
			r.rerr = err
		}
	}
}

// partial reports whether the buffer holds the beginning of a command not
// read to its end yet.
func (r *reqReader) partial() bool { return r.end > r.start }

// fill makes room in the buffer and reads once into it.
func (r *reqReader) fill() error {
	switch {
	case r.start == r.end:
		r.start, r.end = 0, 0
		if r.buf == nil || cap(r.buf) > maxKeptReqBuf {
			r.buf = make([]byte, reqBufSize)
		}
	case r.start > 0:
		// A part of a command is left: move it to the front.
		r.end = copy(r.buf, r.buf[r.start:r.end])
		r.start = 0
	}
	if r.end == len(r.buf) {
		// One unfinished command fills the buffer.
		nb := make([]byte, 2*len(r.buf))
		copy(nb, r.buf[:r.end])
		r.buf = nb
	}
	n, err := r.rd.Read(r.buf[r.end:])
	if n < 0 || n > len(r.buf)-r.end {
		return errors.New("read returned an invalid count")
	}
	r.end += n
	if err == nil && n == 0 {
		if r.empty++; r.empty >= maxEmptyReads {
			return io.ErrNoProgress
		}
	} else {
		r.empty = 0
	}
	return err
}

// slice points each command's Args at its range of argv, once argv has
// stopped growing.
func (r *reqReader) slice() {
	from := 0
	for _, to := range r.ends {
		r.cmds = append(r.cmds, redcon.Command{Args: r.argv[from:to:to]})
		from = to
	}
}

// parse takes every complete command at the front of buf[start:end] into
// argv and ends, and leaves start at the first byte not taken.
func (r *reqReader) parse() error {
	for r.start < r.end {
		b := r.buf[r.start:r.end]
		var n int
		var err error
		if b[0] == '*' {
			n, err = r.multibulk(b)
		} else {
			n, err = r.inline(b)
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil // incomplete
		}
		r.start += n
	}
	return nil
}

// multibulk parses the `*N` command at the start of b into argv. It returns
// the command's length, 0 when b holds only a part of it (argv is left as
// it was), or a framing error.
func (r *reqReader) multibulk(b []byte) (int, error) {
	count, i, ok := reqNum(b, 1)
	switch {
	case !ok:
		return 0, errReqFraming
	case i == 0:
		return 0, nil
	case count == 0:
		return 0, errReqFraming
	}
	mark := len(r.argv)
	for ; count > 0; count-- {
		if i >= len(b) {
			r.argv = r.argv[:mark]
			return 0, nil
		}
		if b[i] != '$' {
			r.argv = r.argv[:mark]
			return 0, errReqFraming
		}
		size, j, ok := reqNum(b, i+1)
		if !ok {
			r.argv = r.argv[:mark]
			return 0, errReqFraming
		}
		if j == 0 || size > uint64(len(b)-j) || len(b)-j-int(size) < 2 {
			r.argv = r.argv[:mark]
			return 0, nil
		}
		k := j + int(size)
		if b[k] != '\r' || b[k+1] != '\n' {
			r.argv = r.argv[:mark]
			return 0, errReqFraming
		}
		r.argv = append(r.argv, b[j:k:k])
		i = k + 2
	}
	r.ends = append(r.ends, len(r.argv))
	return i, nil
}

// reqNum parses the decimal number of a `*N` or `$L` header starting at
// b[i], followed by `\r\n`: no sign, no leading zero, at most
// maxReqNumDigits digits. It returns the number and the index after the
// `\r\n`; that index is 0 when b ends first, and ok is false when the
// header is malformed.
func reqNum(b []byte, i int) (n uint64, next int, ok bool) {
	start := i
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if i-start == maxReqNumDigits || i > start && n == 0 {
			return 0, 0, false
		}
		n = n*10 + uint64(b[i]-'0')
	}
	switch {
	case i == len(b):
		return 0, 0, true
	case i == start || b[i] != '\r':
		return 0, 0, false
	case i+1 == len(b):
		return 0, 0, true
	case b[i+1] != '\n':
		return 0, 0, false
	}
	return n, i + 2, true
}

// inline parses the inline command line at the start of b with redcon's
// tokenizer. It returns the line's length, 0 when b holds no whole line,
// or a framing error (unbalanced quotes). A line of nothing but spaces is
// taken with no command, as redcon does.
func (r *reqReader) inline(b []byte) (int, error) {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return 0, nil
	}
	cmd, err := redcon.Parse(b[:nl+1])
	if err != nil {
		line := bytes.TrimSuffix(b[:nl], []byte("\r"))
		if len(bytes.Trim(line, " ")) == 0 {
			return nl + 1, nil // redcon: no arguments, no command
		}
		return 0, &reqProtocolError{reason: errUnbalancedQuotes.reason}
	}
	r.argv = append(r.argv, cmd.Args...)
	r.ends = append(r.ends, len(r.argv))
	return nl + 1, nil
}
