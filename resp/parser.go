package resp

import (
	"bytes"
	"errors"
	"io"
	"math"

	"github.com/tidwall/redcon"
)

// The request parser.
//
// Each connection reads its requests with one parser, which frames them,
// enforces the protocol limits and splits them into arguments in one pass,
// keeping its place across reads the way Redis's processMultibulkBuffer
// does: an unfinished command is never parsed again from its start.
//
// Arguments. The parser keeps one read buffer, and every argument it
// returns is a sub-slice of that buffer, listed in one argument slice that
// is reused from read to read: a steady client costs no allocation per
// command or per argument. The arguments are valid until the next call of
// next, that is, for as long as the pipeline they belong to runs; nothing
// may keep them after that (the Executor does not keep its ops, MULTI
// copies what it queues, and the rule cache and the tracking tables copy
// what they remember).
//
// Framing, with Redis 7's rules and texts (errors.go, protoErrs):
//
//   - multibulk: `*N\r\n` with 1 <= N <= MaxArgs (no sign, no leading zero,
//     at most 19 digits), then N times `$L\r\n`, L bytes, `\r\n`, with
//     0 <= L <= MaxBulk. `*0` and `*-1`, which Redis ignores, are refused.
//     A command whose bytes pass MaxQueryBuffer is refused as it arrives.
//     A command arriving whole in the buffer is taken by a fast path
//     (whole); any other by the state machine (multibulk), which stops
//     where the buffer ends and goes on from there after the next read.
//   - inline: any line that does not start with '*', up to '\n' (a '\r'
//     before it is dropped), at most MaxInline bytes, split into arguments
//     by Redis's rules (inline.go, splitInline). A line of blanks is no
//     command. A NUL byte in the line hides its end, as in Redis (which
//     looks for the '\n' with strchr): the line ends only in the
//     MaxInline error. A line whose first argument is POST or Host: closes
//     the connection without a reply.
//
// Errors. The parser stops at the first byte that breaks a rule. The
// commands before it are returned as usual; the server runs them and
// writes their replies, and the next call returns the *ProtocolError, on
// which the server writes its reply (ProtocolError.Reply) and closes.
//
// Before authentication (when a password is set and the client has not
// authenticated), the limits are Redis's pre-auth ones, and next returns
// one command at a time, so that a pipelined AUTH followed by a large
// command is judged by the limits in force after the AUTH, as Redis does.
//
// Memory. The buffer starts at reqBufSize bytes. It doubles only when one
// unfinished command fills it, so an S-byte command costs at most about
// 2*S of buffer, and MaxQueryBuffer bounds S. Once drained, or down to a
// small unfinished command, a buffer larger than maxKeptReqBuf is dropped
// for a new one of reqBufSize. The argument slice is dropped likewise when
// a read's commands had more than maxKeptArgs arguments.

const (
	// reqBufSize is the read buffer of a connection.
	reqBufSize = 16 << 10
	// maxKeptReqBuf is the largest read buffer a connection keeps once it
	// is drained.
	maxKeptReqBuf = 64 << 10
	// maxKeptArgs is the most argument slots a connection keeps between
	// pipelines.
	maxKeptArgs = 4096
	// maxEmptyReads is how many reads in a row may return nothing before
	// the connection is given up (as bufio does).
	maxEmptyReads = 100
	// maxHeaderDigits bounds the digits of `*N` and `$L`: 10^19 > MaxInt64,
	// and a 19-digit number fits a uint64.
	maxHeaderDigits = 19
)

// Limits are the protocol limits (docs/commands.md, "Protocol limits"): the
// most a client may send before it gets an error and its connection is
// closed. A field <= 0 takes its default.
type Limits struct {
	MaxBulk        int64 // bytes of one bulk argument; default 1 MiB
	MaxArgs        int64 // arguments of one multibulk command; default 1,048,576
	MaxInline      int64 // bytes of one inline command line; default 64 KiB
	MaxQueryBuffer int64 // bytes of one unfinished command; default 8 MiB
	PreAuthMaxBulk int64 // MaxBulk until authenticated, when a password is set; default 16 KiB
	PreAuthMaxArgs int64 // MaxArgs until authenticated, when a password is set; default 10
}

// DefaultLimits returns the default protocol limits (Redis's, with a 1 MiB
// bulk cap).
func DefaultLimits() Limits {
	return Limits{
		MaxBulk:        1 << 20,
		MaxArgs:        1 << 20,
		MaxInline:      64 << 10,
		MaxQueryBuffer: 8 << 20,
		PreAuthMaxBulk: 16 << 10,
		PreAuthMaxArgs: 10,
	}
}

// withDefaults fills the fields <= 0 with their defaults.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	orDefault := func(v *int64, def int64) {
		if *v <= 0 {
			*v = def
		}
	}
	orDefault(&l.MaxBulk, d.MaxBulk)
	orDefault(&l.MaxArgs, d.MaxArgs)
	orDefault(&l.MaxInline, d.MaxInline)
	orDefault(&l.MaxQueryBuffer, d.MaxQueryBuffer)
	orDefault(&l.PreAuthMaxBulk, d.PreAuthMaxBulk)
	orDefault(&l.PreAuthMaxArgs, d.PreAuthMaxArgs)
	return l
}

// reqLimits are the limits of one call of next, as the parser compares
// them.
type reqLimits struct {
	maxArgs, maxBulk    uint64
	maxInline, maxQuery int
	authArgs, authBulk  uint64 // the pre-auth limits; MaxUint64 when authenticated
	preAuth             bool   // one command per call
}

// The parser's states: where in a command the next byte is.
const (
	psStart     uint8 = iota // at a command boundary
	psInline                 // in an inline line
	psCount                  // in `*N`, after '*'
	psCountLF                // after `*N\r`
	psDollar                 // expecting '$'
	psBulkLen                // in `$L`, after '$'
	psBulkLenLF              // after `$L\r`
	psPayload                // in a bulk's payload
	psPayloadCR              // expecting the payload's '\r'
	psPayloadLF              // expecting the payload's '\n'
)

// span is an argument of the unfinished command, as offsets from its
// start (the buffer may move before the command ends).
type span struct{ from, to int }

// reqParser reads RESP requests, multibulk or inline, from rd into commands
// whose arguments point into its buffer. It is used by one goroutine.
type reqParser struct {
	rd    io.Reader
	lim   Limits
	buf   []byte // buf[cs:end] is read and not yet returned as commands
	cs    int    // where the unfinished command starts
	pos   int    // buf[cs:pos] is parsed: the state below describes it
	end   int
	rerr  error // rd's error, returned once the commands before it are
	perr  error // the *ProtocolError, returned once the commands before it are
	empty int   // consecutive reads that returned nothing and no error

	// The unfinished command.
	state  uint8
	digits uint8  // digits of the header number so far
	nul    bool   // inline: a NUL byte came before any '\n'
	num    uint64 // the header number being read
	args   uint64 // bulks still to come
	left   int64  // payload bytes still to come
	arg    int    // where the payload starts, from cs
	spans  []span // the arguments so far

	argv [][]byte         // the arguments of the commands of the last call
	cmds []redcon.Command // the last call's commands; their Args point into argv
	ends []int            // cmds[i]'s arguments are argv[ends[i-1]:ends[i]]
}

// newReqParser returns a parser of rd with the given limits.
func newReqParser(rd io.Reader, lim Limits) *reqParser {
	return &reqParser{rd: rd, lim: lim.withDefaults()}
}

// limits returns the limits in force: the pre-auth ones when preAuth.
func (p *reqParser) limits(preAuth bool) reqLimits {
	l := reqLimits{
		maxArgs:   uint64(p.lim.MaxArgs),
		maxBulk:   uint64(p.lim.MaxBulk),
		maxInline: int(min(p.lim.MaxInline, math.MaxInt32)),
		maxQuery:  int(min(p.lim.MaxQueryBuffer, math.MaxInt/4)),
		authArgs:  math.MaxUint64,
		authBulk:  math.MaxUint64,
	}
	if preAuth {
		l.preAuth = true
		l.authArgs = uint64(p.lim.PreAuthMaxArgs)
		l.authBulk = uint64(p.lim.PreAuthMaxBulk)
	}
	return l
}

// next returns the complete commands of the next read (at least one; one
// only when preAuth), or the error that ended the connection: io.EOF, the
// connection's error, or a *ProtocolError (its reply not written yet). The
// commands and their arguments are valid until the next call.
func (p *reqParser) next(preAuth bool) ([]redcon.Command, error) {
	p.cmds, p.argv, p.ends = p.cmds[:0], p.argv[:0], p.ends[:0]
	if cap(p.argv) > maxKeptArgs {
		p.argv, p.ends, p.cmds = nil, nil, nil
	}
	if cap(p.spans) > maxKeptArgs && p.state == psStart {
		p.spans = nil
	}
	if p.perr != nil {
		return nil, p.perr
	}
	l := p.limits(preAuth)
	for {
		if err := p.parse(&l); err != nil {
			p.perr = err
			if len(p.ends) == 0 {
				return nil, err
			}
		}
		if len(p.ends) > 0 {
			from := 0
			for _, to := range p.ends {
				p.cmds = append(p.cmds, redcon.Command{Args: p.argv[from:to:to]})
				from = to
			}
			return p.cmds, nil
		}
		if p.rerr != nil {
			err := p.rerr
			p.rerr = nil
			return nil, err
		}
		if err := p.fill(); err != nil {
			p.rerr = err
		}
	}
}

// partial reports whether the buffer holds bytes of a command not
// returned yet.
func (p *reqParser) partial() bool { return p.end > p.cs }

// fill makes room in the buffer and reads once into it.
func (p *reqParser) fill() error {
	switch n := p.end - p.cs; {
	case n == 0:
		p.cs, p.pos, p.end = 0, 0, 0
		if p.buf == nil || cap(p.buf) > maxKeptReqBuf {
			p.buf = make([]byte, reqBufSize)
		}
	case p.cs > 0:
		// A part of a command is left: move it to the front, to a new
		// small buffer when this one is large and the part small.
		dst := p.buf
		if cap(p.buf) > maxKeptReqBuf && n <= reqBufSize/2 {
			dst = make([]byte, reqBufSize)
		}
		copy(dst, p.buf[p.cs:p.end])
		p.buf = dst
		p.pos -= p.cs
		p.cs, p.end = 0, n
	}
	if p.end == len(p.buf) {
		// One unfinished command fills the buffer.
		nb := make([]byte, 2*len(p.buf))
		copy(nb, p.buf[:p.end])
		p.buf = nb
	}
	n, err := p.rd.Read(p.buf[p.end:])
	if n < 0 || n > len(p.buf)-p.end {
		return errors.New("read returned an invalid count")
	}
	p.end += n
	if err == nil && n == 0 {
		if p.empty++; p.empty >= maxEmptyReads {
			return io.ErrNoProgress
		}
	} else {
		p.empty = 0
	}
	return err
}

// parse takes every complete command of buf[cs:end] (one before
// authentication) into argv and ends, and parses the unfinished one
// after them as far as it goes.
func (p *reqParser) parse(l *reqLimits) *ProtocolError {
	for p.pos < p.end {
		var done bool
		var err *ProtocolError
		switch {
		case p.state == psStart && l.preAuth && len(p.ends) > 0:
			return nil
		case p.state == psStart && p.buf[p.cs] == '*':
			if n := p.whole(l); n > 0 {
				p.cs += n
				p.pos = p.cs
				continue
			}
			p.state, p.num, p.digits, p.spans = psCount, 0, 0, p.spans[:0]
			p.pos++
			if p.pos-p.cs > l.maxQuery {
				return &ProtocolError{what: protoQueryBuffer}
			}
			done, err = p.multibulk(l)
		case p.state == psStart:
			p.state, p.nul = psInline, false
			done, err = p.inline(l)
		case p.state == psInline:
			done, err = p.inline(l)
		default:
			done, err = p.multibulk(l)
		}
		if err != nil {
			return err
		}
		if !done {
			return nil
		}
		p.state = psStart
		p.cs = p.pos
	}
	return nil
}

// whole is the fast path of a multibulk command: when buf[cs:end] starts
// with a whole one, well framed and within the limits, it takes its
// arguments into argv and returns its length; otherwise it returns 0 and
// the state machine takes the command (finding the same arguments, or what
// is wrong, or where the buffer ends).
func (p *reqParser) whole(l *reqLimits) int {
	b := p.buf[p.cs:p.end]
	if len(b) > l.maxQuery {
		b = b[:l.maxQuery]
	}
	count, i := headerNum(b, 1)
	if i == 0 || count == 0 || count > l.maxArgs || count > l.authArgs {
		return 0
	}
	argv, mark := p.argv, len(p.argv)
	for ; count > 0; count-- {
		if i >= len(b) || b[i] != '$' {
			break
		}
		size, j := headerNum(b, i+1)
		if j == 0 || size > l.maxBulk || size > l.authBulk || size > uint64(len(b)-j) || len(b)-j-int(size) < 2 {
			break
		}
		k := j + int(size)
		if b[k] != '\r' || b[k+1] != '\n' {
			break
		}
		argv = append(argv, b[j:k:k])
		i = k + 2
	}
	if count > 0 {
		p.argv = argv[:mark] // keeps any room it grew
		return 0
	}
	p.argv = argv
	p.ends = append(p.ends, len(p.argv))
	return i
}

// headerNum parses the number of a `*N` or `$L` header at b[i:], followed
// by `\r\n`: at most maxHeaderDigits digits, no sign, no leading zero. It
// returns the number and the index after the `\r\n`, or 0 for that index
// when b does not hold a whole valid header there.
func headerNum(b []byte, i int) (uint64, int) {
	var n uint64
	start := i
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if i-start == maxHeaderDigits || i > start && n == 0 {
			return 0, 0
		}
		n = n*10 + uint64(b[i]-'0')
	}
	if i == start || i+1 >= len(b) || b[i] != '\r' || b[i+1] != '\n' {
		return 0, 0
	}
	return n, i + 2
}

// multibulk runs the state machine over buf[pos:end], one byte at a time
// except for payloads and whole bulk arguments. It reports whether the
// command ended (its arguments are then in argv), or the first violation.
func (p *reqParser) multibulk(l *reqLimits) (bool, *ProtocolError) {
	b := p.buf[:p.end]
	i := p.pos
	for i < len(b) {
		c := b[i]
		adv := 1
		end := false
		var err *ProtocolError
		switch p.state {
		case psCount:
			if !p.header(c, false) {
				err = &ProtocolError{what: protoInvalidMultibulk}
			} else if c == '\r' {
				p.state = psCountLF
			}
		case psCountLF:
			err = p.headerEnd(c, l.maxArgs, l.authArgs, protoInvalidMultibulk, protoUnauthMultibulk)
			p.args = p.num
			p.state = psDollar
		case psDollar:
			if c != '$' {
				err = &ProtocolError{what: protoExpectedDollar, got: c}
				break
			}
			if from, to := p.wholeBulk(b[i:], l, i-p.cs); to > 0 {
				// The whole argument at once; the state stays psDollar.
				p.spans = append(p.spans, span{i - p.cs + from, i - p.cs + to})
				adv = to + 2
				p.args--
				end = p.args == 0
				break
			}
			p.state, p.num, p.digits = psBulkLen, 0, 0
		case psBulkLen:
			if !p.header(c, true) {
				err = &ProtocolError{what: protoInvalidBulk}
			} else if c == '\r' {
				p.state = psBulkLenLF
			}
		case psBulkLenLF:
			err = p.headerEnd(c, l.maxBulk, l.authBulk, protoInvalidBulk, protoUnauthBulk)
			p.left = int64(p.num)
			p.arg = i + 1 - p.cs
			p.state = psPayload
			if p.left == 0 {
				p.spans = append(p.spans, span{p.arg, p.arg})
				p.state = psPayloadCR
			}
		case psPayload:
			if k := int64(len(b) - i); k < p.left {
				adv = int(k)
			} else {
				adv = int(p.left)
				p.spans = append(p.spans, span{p.arg, i + adv - p.cs})
				p.state = psPayloadCR
			}
			p.left -= int64(adv)
		case psPayloadCR:
			if c != '\r' {
				err = &ProtocolError{what: protoInvalidBulk}
			}
			p.state = psPayloadLF
		case psPayloadLF:
			if c != '\n' {
				err = &ProtocolError{what: protoInvalidBulk}
			}
			p.args--
			end = p.args == 0
			p.state = psDollar
		}
		if err != nil {
			p.pos = i
			return false, err
		}
		i += adv
		if i-p.cs > l.maxQuery {
			p.pos = i
			return false, &ProtocolError{what: protoQueryBuffer}
		}
		if end {
			p.pos = i
			base := p.buf[p.cs:]
			for _, s := range p.spans {
				p.argv = append(p.argv, base[s.from:s.to:s.to])
			}
			p.ends = append(p.ends, len(p.argv))
			return true, nil
		}
	}
	p.pos = i
	return false, nil
}

// wholeBulk is the state machine's fast path of a bulk argument: when b
// starts with a whole valid one (`$L\r\n`, L payload bytes, `\r\n`) within
// the limits, where b starts at offset size of the command, it returns
// where its payload starts and ends in b, which the byte-by-byte states
// would find with the same outcome; otherwise to is 0, and those states
// take it (and find any error) one byte at a time.
func (p *reqParser) wholeBulk(b []byte, l *reqLimits, size int) (from, to int) {
	if size+len(b) > l.maxQuery {
		b = b[:max(l.maxQuery-size, 0)]
	}
	n, j := headerNum(b, 1)
	if j == 0 || n > l.maxBulk || n > l.authBulk || n > uint64(len(b)-j) || len(b)-j-int(n) < 2 {
		return 0, 0
	}
	k := j + int(n)
	if b[k] != '\r' || b[k+1] != '\n' {
		return 0, 0
	}
	return j, k
}

// header takes one byte of a `*N` or `$L` header: a decimal number with no
// sign and no leading zero (0 itself only when zeroOK), at most
// maxHeaderDigits digits, then '\r'. It reports whether the byte is valid.
func (p *reqParser) header(c byte, zeroOK bool) bool {
	switch {
	case c >= '0' && c <= '9':
		if p.digits > 0 && p.num == 0 || // leading zero
			c == '0' && p.digits == 0 && !zeroOK ||
			p.digits == maxHeaderDigits {
			return false
		}
		p.num = p.num*10 + uint64(c-'0')
		p.digits++
		return true
	case c == '\r':
		return p.digits > 0
	}
	return false
}

// headerEnd checks the byte after a length header's '\r', which must be
// '\n', and the length: at most max (else bad), and at most authMax (else
// unauth), the limit before AUTH.
func (p *reqParser) headerEnd(c byte, max, authMax uint64, bad, unauth protoErr) *ProtocolError {
	switch {
	case c != '\n' || p.num > max:
		return &ProtocolError{what: bad}
	case p.num > authMax:
		return &ProtocolError{what: unauth}
	}
	return nil
}

// inline follows an inline line over buf[pos:end]. At its '\n' it splits
// the line into argv (inline.go) and reports that the command ended; a
// line of blanks ends with no command.
func (p *reqParser) inline(l *reqLimits) (bool, *ProtocolError) {
	b := p.buf[:p.end]
	for i := p.pos; i < len(b); i++ {
		k := i - p.cs // the byte's place in the line
		switch c := b[i]; {
		case c == '\n' && !p.nul:
			line := b[p.cs:i]
			if len(line) > 0 && line[len(line)-1] == '\r' {
				line = line[:len(line)-1]
			}
			mark := len(p.argv)
			var ok bool
			if p.argv, ok = splitInline(line, p.argv); !ok {
				p.argv, p.pos = p.argv[:mark], i
				return false, &ProtocolError{what: protoUnbalancedQuotes}
			}
			if len(p.argv) > mark && (bytes.EqualFold(p.argv[mark], []byte("post")) || bytes.EqualFold(p.argv[mark], []byte("host:"))) {
				p.argv, p.pos = p.argv[:mark], i
				return false, &ProtocolError{what: protoHTTP}
			}
			if k+1 > l.maxQuery {
				p.argv, p.pos = p.argv[:mark], i
				return false, &ProtocolError{what: protoQueryBuffer}
			}
			if len(p.argv) > mark {
				p.ends = append(p.ends, len(p.argv))
			}
			p.pos = i + 1
			return true, nil
		case k >= l.maxInline:
			p.pos = i
			return false, &ProtocolError{what: protoTooBigInline}
		case c == 0:
			p.nul = true
		}
		if k+1 > l.maxQuery {
			p.pos = i
			return false, &ProtocolError{what: protoQueryBuffer}
		}
	}
	p.pos = len(b)
	return false, nil
}
