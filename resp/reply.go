package resp

import "strconv"

// replyBuf appends RESP replies to a byte slice in the protocol version of
// the connection (2 or 3). The server renders a whole pipeline's replies into
// one replyBuf and writes it to the connection at once, so rendering never
// allocates once the buffer has grown to the pipeline's size.
type replyBuf struct {
	b     []byte
	proto int
}

func (r *replyBuf) header(prefix byte, n int64) {
	if uint64(n) < 10 { // most flags, counts and array lengths: no conversion
		r.b = append(r.b, prefix, byte('0'+n), '\r', '\n')
		return
	}
	r.b = append(r.b, prefix)
	r.b = strconv.AppendInt(r.b, n, 10)
	r.b = append(r.b, '\r', '\n')
}

// Int appends an integer reply.
func (r *replyBuf) Int(n int64) { r.header(':', n) }

// Array appends an array header of n elements.
func (r *replyBuf) Array(n int) { r.header('*', int64(n)) }

// Map appends a map header of n key-value pairs: a RESP3 map, or a flat
// array of 2n elements in RESP2.
func (r *replyBuf) Map(n int) {
	if r.proto == 3 {
		r.header('%', int64(n))
		return
	}
	r.header('*', int64(2*n))
}

// Bulk appends a bulk string.
func (r *replyBuf) Bulk(b []byte) {
	r.header('$', int64(len(b)))
	r.b = append(r.b, b...)
	r.b = append(r.b, '\r', '\n')
}

// BulkString appends a bulk string.
func (r *replyBuf) BulkString(s string) {
	r.header('$', int64(len(s)))
	r.b = append(r.b, s...)
	r.b = append(r.b, '\r', '\n')
}

// BulkInt appends an integer rendered as a bulk string (as TIME and SCAN
// cursors are).
func (r *replyBuf) BulkInt(n int64) {
	var tmp [20]byte
	r.Bulk(strconv.AppendInt(tmp[:0], n, 10))
}

// Simple appends a simple string (s must not contain CR or LF).
func (r *replyBuf) Simple(s string) {
	r.b = append(r.b, '+')
	r.b = append(r.b, s...)
	r.b = append(r.b, '\r', '\n')
}

// OK appends +OK.
func (r *replyBuf) OK() { r.Simple("OK") }

// Error appends an error reply; msg is the text without the leading '-'
// (for example "ERR syntax error"). CR and LF are replaced by spaces so that
// an error can never break the framing.
func (r *replyBuf) Error(msg string) {
	r.b = append(r.b, '-')
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		r.b = append(r.b, c)
	}
	r.b = append(r.b, '\r', '\n')
}

// Null appends the null reply: RESP3's _ or RESP2's null bulk string.
func (r *replyBuf) Null() {
	if r.proto == 3 {
		r.b = append(r.b, '_', '\r', '\n')
		return
	}
	r.b = append(r.b, "$-1\r\n"...)
}

// NullArray appends the null array: RESP3's _ or RESP2's *-1 (EXEC of a
// transaction whose watched keys changed, LPOP/ZPOP with a count on a
// missing key).
func (r *replyBuf) NullArray() {
	if r.proto == 3 {
		r.b = append(r.b, '_', '\r', '\n')
		return
	}
	r.b = append(r.b, "*-1\r\n"...)
}

// Verbatim appends a text blob: a RESP3 verbatim string of format txt, or a
// bulk string in RESP2 (as Redis replies INFO).
func (r *replyBuf) Verbatim(s string) {
	if r.proto != 3 {
		r.BulkString(s)
		return
	}
	r.header('=', int64(len(s)+4))
	r.b = append(r.b, "txt:"...)
	r.b = append(r.b, s...)
	r.b = append(r.b, '\r', '\n')
}

// Set appends a set header of n elements: a RESP3 set, or an array in RESP2.
func (r *replyBuf) Set(n int) {
	if r.proto == 3 {
		r.header('~', int64(n))
		return
	}
	r.header('*', int64(n))
}

// Double appends a double already printed as text (Redis's %.17g, "inf",
// "-inf"): a RESP3 double, or a bulk string in RESP2.
func (r *replyBuf) Double(text []byte) {
	if r.proto != 3 {
		r.Bulk(text)
		return
	}
	r.b = append(r.b, ',')
	r.b = append(r.b, text...)
	r.b = append(r.b, '\r', '\n')
}
