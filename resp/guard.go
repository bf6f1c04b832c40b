package resp

// The protocol guard.
//
// A RESP reader with no limits can be made to crash, spin or grow without
// bound: redcon v1.6.2's, which sluice used to read requests with, panics on
// `*1\r\n$9223372036854775807\r\n` in the connection goroutine (killing the
// process), spins a core on `*9223372036854775807\r\n`, and grows its read
// buffer without bound. So every accepted connection is a GuardConn, and
// the server's request reader (reader.go) reads through it: GuardConn.Read
// runs each byte through an incremental RESP framing state machine and
// passes on only bytes that are well framed and within Limits. The machine keeps
// counters, never payload; the only bytes the guard holds are the carry of
// the delivery policy below (at most guardChunk). It is O(bytes) and
// allocates nothing per read.
//
// What the guard accepts is a strict subset of what redcon's reader parses,
// and redcon's reader parses it the same way as the request reader does:
//
//   - multibulk: `*N\r\n` with 1 <= N <= MaxArgs (no sign, no leading zero),
//     then N times `$L\r\n`, L bytes, `\r\n`, with 0 <= L <= MaxBulk. redcon
//     also takes `*0`, `*-1`, `$`, `$-0` and `$007` (and rejects `*0` and
//     `*-1` itself); Redis rejects the last three and ignores the first two.
//     The guard rejects all of them, with Redis's texts.
//   - inline: any line that does not start with '*', up to '\n', at most
//     MaxInline bytes. redcon splits it on spaces and quotes, allocating a
//     copy of the rest of the line at every separator (quadratic: 64 KiB of
//     spaces costs it ~190 ms of CPU, measured). The guard follows redcon's
//     tokenizer and bounds that work to inlineWorkFactor bytes per byte of
//     the line. It also rejects the quoting redcon rejects ("unbalanced
//     quotes"): redcon's own protocol errors drop the replies of the
//     commands parsed before them in the same read, the guard's do not.
//
// Delivery policy, and why. It was made for redcon's reader, and the
// request reader relies on it too. redcon keeps its consumed bytes until
// its buffer is exactly drained, and doubles the buffer whenever it fills
// while a command is unfinished: a client that streams valid pipelined commands so
// that every read ends mid-command grows it without bound (measured: 8 GB
// after 1.6M reads of "NG\r\nPING\r\nPI"). redcon also re-parses an
// unfinished command from its start on every read. So each Read returns
// either bytes that end exactly at a command boundary (the unfinished tail
// after the last boundary is carried to the next Read, at most guardChunk
// bytes), or bytes that all belong to one unfinished command, filling p
// entirely (redcon's buffer then doubles, so an S-byte command costs
// O(log S) re-parses and at most about 2*(S+4 KiB) of buffer). Together with
// MaxQueryBuffer, that bounds redcon's memory per connection. The request
// reader's buffer is drained after every read that ends at a boundary, and
// grows, doubling, only when one unfinished command fills it: the same
// bounds.
//
// Ordering on a violation: Read first returns the bytes of the complete
// commands before the offending one; the server runs them and writes their
// replies before it calls Read again, and only that next Read writes
// `-ERR Protocol error: ...\r\n` to the client and returns a *ProtocolError,
// on which the server closes the connection. The offending command is never
// complete in the reader's buffer: at most a part of it was passed on, when
// it is longer than a read (so it is never parsed).
//
// Before authentication (when a password is set), the limits are Redis's
// pre-auth ones, and Read passes on one command at a time, so that a
// pipelined `AUTH` followed by a large command is judged by the limits in
// force after the AUTH, as Redis does.
//
// HTTP: like Redis, an inline line whose first word is `POST` or `Host:`
// (case-insensitive) is taken for a cross-protocol attack from a browser and
// the connection is closed without a reply; the lines before it are served
// (Redis answers `GET / HTTP/1.1` with an error and closes at `Host:`).

import (
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// guardChunk is the most the guard reads from the connection at once,
	// except inside a bulk payload, and so the most it ever carries.
	guardChunk = 16 << 10
	// maxHeaderDigits bounds the digits of `*N` and `$L`: 10^19 > MaxInt64,
	// and a 19-digit number fits a uint64.
	maxHeaderDigits = 19
	// inlineWorkFactor bounds redcon's inline tokenizer work: the bytes it
	// allocates, one rest-of-line per separator, may be at most this many
	// per byte of the line (about 128 arguments on a short line, 64
	// separators on a 64 KiB one; ~1.5 ms of CPU at worst).
	inlineWorkFactor = 64
	// errorWriteTimeout bounds the write of the error reply.
	errorWriteTimeout = time.Second
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
	if l.MaxBulk <= 0 {
		l.MaxBulk = d.MaxBulk
	}
	if l.MaxArgs <= 0 {
		l.MaxArgs = d.MaxArgs
	}
	if l.MaxInline <= 0 {
		l.MaxInline = d.MaxInline
	}
	if l.MaxQueryBuffer <= 0 {
		l.MaxQueryBuffer = d.MaxQueryBuffer
	}
	if l.PreAuthMaxBulk <= 0 {
		l.PreAuthMaxBulk = d.PreAuthMaxBulk
	}
	if l.PreAuthMaxArgs <= 0 {
		l.PreAuthMaxArgs = d.PreAuthMaxArgs
	}
	return l
}

// ProtocolError is the error GuardConn.Read returns once it has rejected a
// client's input. The reply (`-ERR <Error()>\r\n`) has been written to the
// client already, except for the HTTP cross-protocol case, which closes
// without a reply as Redis does.
type ProtocolError struct {
	reason string
	silent bool
}

// Error returns "Protocol error: <reason>", the reply text without "ERR ".
func (e *ProtocolError) Error() string { return "Protocol error: " + e.reason }

// The framing violations, with Redis 7's texts where Redis has one.
var (
	errInvalidMultibulk = &ProtocolError{reason: "invalid multibulk length"}
	errInvalidBulk      = &ProtocolError{reason: "invalid bulk length"}
	errUnauthMultibulk  = &ProtocolError{reason: "unauthenticated multibulk length"}
	errUnauthBulk       = &ProtocolError{reason: "unauthenticated bulk length"}
	errTooBigInline     = &ProtocolError{reason: "too big inline request"}
	errInlineSeparators = &ProtocolError{reason: "too many separators in inline request"}
	errQueryBuffer      = &ProtocolError{reason: "query buffer limit exceeded"}
	errUnbalancedQuotes = &ProtocolError{reason: "unbalanced quotes in request"}
	errHTTPRequest      = &ProtocolError{reason: "possible SECURITY ATTACK detected: HTTP POST or Host: line on the RESP port", silent: true}
)

// errExpectedDollar is Redis's "expected '$', got 'x'". As Redis does, it
// never puts \r or \n in a reply; other non-printable bytes become a space
// too.
func errExpectedDollar(c byte) *ProtocolError {
	if c < 0x20 || c > 0x7e {
		c = ' '
	}
	return &ProtocolError{reason: "expected '$', got '" + string(rune(c)) + "'"}
}

// guardListener wraps each accepted connection in a GuardConn.
type guardListener struct {
	net.Listener
	limits   Limits
	needAuth bool
}

// NewGuardListener wraps ln; every accepted conn is a *GuardConn with the
// given limits. needAuth applies the pre-auth limits to every new connection
// until SetAuthenticated(true).
func NewGuardListener(ln net.Listener, limits Limits, needAuth bool) net.Listener {
	return &guardListener{Listener: ln, limits: limits.withDefaults(), needAuth: needAuth}
}

// Accept returns the next connection, guarded.
func (l *guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return NewGuardConn(c, l.limits, l.needAuth), nil
}

// GuardConn is a net.Conn whose Read passes on only well-framed RESP within
// Limits (see the package's guard notes). Everything but Read and Write is
// the underlying connection's. Read is not safe for concurrent use (the
// connection's goroutine reads); SetAuthenticated is safe from any goroutine.
//
// Write is serialized by a mutex, so that each Write reaches the client
// whole and in one piece. The connection's goroutine writes each segment's
// replies (pipeline.go) as one Write, and the server writes the out-of-band RESP3 pushes
// of client-side caching (tracking.go) from another goroutine, also as one
// Write each: a push thus falls between replies, never inside one.
type GuardConn struct {
	net.Conn
	wmu      sync.Mutex // serializes Write; a leaf lock
	limits   Limits
	needAuth bool
	authed   atomic.Bool

	f     framer
	carry []byte // carry[cr:] was read but not passed on; it starts at a command boundary
	cr    int
	rerr  error // the connection's read error, returned after the data before it
	fail  *ProtocolError
	sent  bool // fail has been reported (reply written)
}

// NewGuardConn wraps c. needAuth applies the pre-auth limits until
// SetAuthenticated(true).
func NewGuardConn(c net.Conn, limits Limits, needAuth bool) *GuardConn {
	return &GuardConn{Conn: c, limits: limits.withDefaults(), needAuth: needAuth}
}

// Write writes b whole, under the connection's write mutex.
func (c *GuardConn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.Conn.Write(b)
}

// SetAuthenticated switches between the pre-auth limits (false) and the
// normal ones (true); it matters only when the conn was made with needAuth.
// The next Read uses the new limits.
func (c *GuardConn) SetAuthenticated(ok bool) { c.authed.Store(ok) }

// frameLimits returns the limits in force now.
func (c *GuardConn) frameLimits() frameLimits {
	l := frameLimits{
		maxArgs:   uint64(c.limits.MaxArgs),
		maxBulk:   uint64(c.limits.MaxBulk),
		maxInline: c.limits.MaxInline,
		maxQuery:  c.limits.MaxQueryBuffer,
		authArgs:  math.MaxUint64,
		authBulk:  math.MaxUint64,
	}
	if c.needAuth && !c.authed.Load() {
		l.preAuth = true
		l.authArgs = uint64(c.limits.PreAuthMaxArgs)
		l.authBulk = uint64(c.limits.PreAuthMaxBulk)
	}
	return l
}

// Read reads from the connection into p and returns the bytes that may go
// on to the request reader, per the delivery policy in the guard notes. After a
// violation it returns the commands before it, and on the next call writes
// the error reply and returns the *ProtocolError (then always).
func (c *GuardConn) Read(p []byte) (int, error) {
	if c.fail != nil {
		return 0, c.reject()
	}
	if len(p) == 0 {
		return 0, nil
	}
	lim := c.frameLimits()
	n := 0 // p[:n] is scanned and belongs to the current, unfinished command
	for {
		var chunk []byte
		fromCarry := c.cr < len(c.carry)
		if fromCarry {
			chunk = p[n : n+copy(p[n:], c.carry[c.cr:])]
		} else {
			if c.rerr != nil {
				if n > 0 {
					return n, nil
				}
				err := c.rerr
				c.rerr = nil
				return 0, err
			}
			want := len(p) - n
			max := int64(guardChunk)
			if c.f.state == fsPayload && c.f.left > max {
				max = c.f.left // all payload of one bulk: no boundary inside
			}
			if int64(want) > max {
				want = int(max)
			}
			m, err := c.Conn.Read(p[n : n+want])
			chunk = p[n : n+m]
			c.rerr = err
		}
		used, last, perr := c.f.scan(chunk, &lim)
		if perr != nil {
			c.fail = perr
			c.carry, c.cr = c.carry[:0], 0
			if last >= 0 {
				return n + last, nil
			}
			return 0, c.reject()
		}
		if last >= 0 {
			// Pass on up to the last boundary; carry the rest, which is
			// scanned again from a clean state next time.
			if fromCarry {
				c.cr += last
			} else {
				c.carry, c.cr = append(c.carry[:0], chunk[last:]...), 0
			}
			if c.cr == len(c.carry) {
				c.carry, c.cr = c.carry[:0], 0
			}
			c.f.reset()
			return n + last, nil
		}
		if fromCarry {
			c.cr += used
			if c.cr == len(c.carry) {
				c.carry, c.cr = c.carry[:0], 0
			}
		}
		n += used
		if n == len(p) || c.rerr != nil {
			if n == 0 {
				err := c.rerr
				c.rerr = nil
				return 0, err
			}
			return n, nil
		}
	}
}

// midCommand reports whether the guard has read the beginning of a
// command whose end has not come yet (it holds such bytes back, or has
// passed them on).
func (c *GuardConn) midCommand() bool {
	return c.f.state != fsStart || c.cr < len(c.carry)
}

// reject reports c.fail: it writes the reply once and returns the error.
func (c *GuardConn) reject() error {
	if !c.sent {
		c.sent = true
		if !c.fail.silent {
			_ = c.Conn.SetWriteDeadline(time.Now().Add(errorWriteTimeout))
			_, _ = io.WriteString(c, "-"+msgProtocol.Text(c.fail.reason)+"\r\n")
		}
	}
	return c.fail
}

// frameLimits are the limits of one Read, as the framer compares them.
type frameLimits struct {
	maxArgs, maxBulk    uint64
	maxInline, maxQuery int64
	authArgs, authBulk  uint64 // pre-auth limits; MaxUint64 when authenticated
	preAuth             bool   // pass on one command per Read
}

// The framer's states.
const (
	fsStart     uint8 = iota // at a command boundary
	fsInline                 // in an inline line
	fsCount                  // in `*N`, after '*'
	fsCountLF                // after `*N\r`
	fsDollar                 // expecting '$'
	fsBulkLen                // in `$L`, after '$'
	fsBulkLenLF              // after `$L\r`
	fsPayload                // in a bulk's payload
	fsPayloadCR              // expecting the payload's '\r'
	fsPayloadLF              // expecting the payload's '\n'
)

// The first words of an HTTP request that Redis closes on, lower case,
// packed big-endian.
const (
	httpPost = uint64('p')<<24 | uint64('o')<<16 | uint64('s')<<8 | uint64('t')
	httpHost = uint64('h')<<32 | uint64('o')<<24 | uint64('s')<<16 | uint64('t')<<8 | uint64(':')
)

// framer is the incremental RESP framing state machine: counters only.
type framer struct {
	state  uint8
	digits uint8
	num    uint64 // the header number being read
	args   uint64 // bulks still to come in this multibulk
	left   int64  // payload bytes still to come in this bulk
	size   int64  // bytes of the current command so far

	// inline line: redcon's tokenizer state and work
	quote        byte  // the open quote, or 0
	escape       bool  // after a backslash in quotes
	tokStart     bool  // at the start of a token (a quote opens one only there)
	afterQuote   bool  // just after a closing quote
	crAfterQuote bool  // after a closing quote and '\r'
	seps         int64 // separators (each one costs redcon the rest of the line)
	sepPos       int64 // sum of their positions
	word         int8  // bytes of the first word seen; -1 when it is settled
	wordVal      uint64
}

// reset puts the framer at a command boundary.
func (f *framer) reset() { f.state = fsStart }

// scan runs b through the framer. It stops at a violation, and after the
// first command boundary when l.preAuth. It returns the bytes consumed, the
// offset just past the last command boundary in b (-1 if none), and the
// violation, if any.
func (f *framer) scan(b []byte, l *frameLimits) (int, int, *ProtocolError) {
	last := -1
	i := 0
	for i < len(b) {
		c := b[i]
		adv := 1
		end := false
		switch f.state {
		case fsStart:
			f.size = 0
			if c == '*' {
				f.state, f.num, f.digits = fsCount, 0, 0
				break
			}
			f.state = fsInline
			f.quote, f.escape, f.tokStart = 0, false, true
			f.afterQuote, f.crAfterQuote = false, false
			f.seps, f.sepPos, f.word, f.wordVal = 0, 0, 0, 0
			adv = 0
		case fsInline:
			if c == '\n' {
				if f.word > 0 && f.httpWord() {
					return i, last, errHTTPRequest
				}
				if f.quote != 0 {
					return i, last, errUnbalancedQuotes
				}
				// The line is f.size bytes; redcon allocates the rest of it
				// at every separator.
				if f.seps*f.size-f.sepPos > inlineWorkFactor*f.size {
					return i, last, errInlineSeparators
				}
				end = true
				break
			}
			if f.size >= l.maxInline {
				return i, last, errTooBigInline
			}
			if err := f.inlineByte(c); err != nil {
				return i, last, err
			}
		case fsCount:
			if !f.header(c, false) {
				return i, last, errInvalidMultibulk
			}
			if c == '\r' {
				f.state = fsCountLF
			}
		case fsCountLF:
			if err := f.headerEnd(c, l.maxArgs, l.authArgs, errInvalidMultibulk, errUnauthMultibulk); err != nil {
				return i, last, err
			}
			f.args = f.num
			f.state = fsDollar
		case fsDollar:
			if c != '$' {
				return i, last, errExpectedDollar(c)
			}
			if n := f.wholeBulk(b[i:], l); n > 0 {
				// The whole argument at once; the state stays fsDollar.
				adv = n
				f.args--
				end = f.args == 0
				break
			}
			f.state, f.num, f.digits = fsBulkLen, 0, 0
		case fsBulkLen:
			if !f.header(c, true) {
				return i, last, errInvalidBulk
			}
			if c == '\r' {
				f.state = fsBulkLenLF
			}
		case fsBulkLenLF:
			if err := f.headerEnd(c, l.maxBulk, l.authBulk, errInvalidBulk, errUnauthBulk); err != nil {
				return i, last, err
			}
			f.left = int64(f.num)
			f.state = fsPayload
			if f.left == 0 {
				f.state = fsPayloadCR
			}
		case fsPayload:
			if k := int64(len(b) - i); k < f.left {
				adv = int(k)
			} else {
				adv = int(f.left)
				f.state = fsPayloadCR
			}
			f.left -= int64(adv)
		case fsPayloadCR:
			if c != '\r' {
				return i, last, errInvalidBulk
			}
			f.state = fsPayloadLF
		case fsPayloadLF:
			if c != '\n' {
				return i, last, errInvalidBulk
			}
			f.args--
			if f.args == 0 {
				end = true
			} else {
				f.state = fsDollar
			}
		}
		i += adv
		f.size += int64(adv)
		if f.size > l.maxQuery {
			return i, last, errQueryBuffer
		}
		if end {
			f.state = fsStart
			last = i
			if l.preAuth {
				return i, last, nil
			}
		}
	}
	return i, last, nil
}

// wholeBulk is the fast path of a bulk argument: when b starts with a
// whole valid one (`$L\r\n`, L payload bytes, `\r\n`) within the limits,
// it returns its length, which the byte-by-byte states would consume with
// the same outcome; otherwise 0, and those states take it (and find any
// error) one byte at a time. Long pipelines of many-argument commands
// (RL.ALL) spend most of the framer's time in these few header bytes.
func (f *framer) wholeBulk(b []byte, l *frameLimits) int {
	var num uint64
	j := 1
	for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
		if j > maxHeaderDigits || j > 1 && num == 0 { // too long, or a leading zero
			return 0
		}
		num = num*10 + uint64(b[j]-'0')
	}
	if j == 1 || j+1 >= len(b) || b[j] != '\r' || b[j+1] != '\n' ||
		num > l.maxBulk || num > l.authBulk || num > uint64(len(b)) {
		return 0
	}
	n := j + 2 + int(num) + 2
	if n > len(b) || b[n-2] != '\r' || b[n-1] != '\n' || f.size+int64(n) > l.maxQuery {
		return 0
	}
	return n
}

// header takes one byte of a `*N` or `$L` header: a decimal number with no
// sign and no leading zero (0 itself only when zeroOK), at most
// maxHeaderDigits digits, then '\r'. It reports whether the byte is valid.
func (f *framer) header(c byte, zeroOK bool) bool {
	switch {
	case c >= '0' && c <= '9':
		if f.digits > 0 && f.num == 0 || // leading zero
			c == '0' && f.digits == 0 && !zeroOK ||
			f.digits == maxHeaderDigits {
			return false
		}
		f.num = f.num*10 + uint64(c-'0')
		f.digits++
		return true
	case c == '\r':
		return f.digits > 0
	}
	return false
}

// headerEnd checks the byte after a length header's '\r', which must be
// '\n', and the length: at most max (else bad), and at most authMax (else
// unauth), the limit before AUTH.
func (f *framer) headerEnd(c byte, max, authMax uint64, bad, unauth *ProtocolError) *ProtocolError {
	switch {
	case c != '\n' || f.num > max:
		return bad
	case f.num > authMax:
		return unauth
	}
	return nil
}

// inlineByte follows one byte (not '\n') of an inline line through redcon's
// tokenizer: it counts the separators at which redcon copies the rest of
// the line, rejects the quoting redcon would reject, and watches the first
// word for an HTTP request.
func (f *framer) inlineByte(c byte) *ProtocolError {
	if f.crAfterQuote {
		// redcon strips a '\r' only at the end of the line.
		return errUnbalancedQuotes
	}
	pos := f.size
	sep := false
	switch {
	case f.afterQuote:
		// After a closing quote redcon wants a space or the end of line.
		switch c {
		case ' ':
			sep = true
		case '\r':
			f.crAfterQuote = true
		default:
			return errUnbalancedQuotes
		}
		f.afterQuote = false
	case f.quote == 0 && c == ' ':
		sep = true
	case f.quote == 0 && (c == '"' || c == '\''):
		if !f.tokStart {
			return errUnbalancedQuotes // a quote inside a word
		}
		f.quote = c
		sep = true
	case f.quote != 0 && f.escape:
		f.escape = false
	case f.quote != 0 && c == f.quote:
		f.quote = 0
		f.afterQuote = true
		sep = true
	case f.quote != 0 && c == '\\':
		f.escape = true
	}
	if sep {
		f.seps++
		f.sepPos += pos
	}
	f.tokStart = sep && !f.afterQuote

	if f.word >= 0 {
		switch {
		case c == ' ' || c == '\r':
			if f.word > 0 {
				if f.httpWord() {
					return errHTTPRequest
				}
				f.word = -1
			}
		case f.word == 5:
			f.word = -1
		default:
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			f.wordVal = f.wordVal<<8 | uint64(c)
			f.word++
		}
	}
	return nil
}

// httpWord reports whether the first word is one Redis closes on.
func (f *framer) httpWord() bool {
	return f.word == 4 && f.wordVal == httpPost || f.word == 5 && f.wordVal == httpHost
}
