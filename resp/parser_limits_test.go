package resp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestParserRejects: each violation, arriving in chunks of several sizes
// after two good commands, ends the parse with its error once those two
// are returned; the error sticks.
func TestParserRejects(t *testing.T) {
	const ok = "*1\r\n$4\r\nPING\r\nPING\r\n" // parsed before the bad command
	tests := []struct {
		name     string
		lim      Limits
		needAuth bool
		bad      string
		reply    string // "" for a silent close
	}{
		{"bulk 2^63-1", DefaultLimits(), false, "*1\r\n$9223372036854775807\r\n", "invalid bulk length"},
		{"bulk 2^64+1", DefaultLimits(), false, "*1\r\n$18446744073709551617\r\nx\r\n", "invalid bulk length"},
		{"bulk 20 digits", DefaultLimits(), false, "*1\r\n$00000000000000000001\r\n", "invalid bulk length"},
		{"bulk over limit", smallLimits(), false, "*1\r\n$101\r\n", "invalid bulk length"},
		{"bulk negative", DefaultLimits(), false, "*1\r\n$-1\r\n", "invalid bulk length"},
		{"bulk minus zero", DefaultLimits(), false, "*1\r\n$-0\r\n\r\n", "invalid bulk length"},
		{"bulk empty", DefaultLimits(), false, "*1\r\n$\r\n\r\n", "invalid bulk length"},
		{"bulk leading zero", DefaultLimits(), false, "*1\r\n$04\r\nPING\r\n", "invalid bulk length"},
		{"bulk plus", DefaultLimits(), false, "*1\r\n$+4\r\nPING\r\n", "invalid bulk length"},
		{"bulk LF only", DefaultLimits(), false, "*1\r\n$4\nPING\r\n", "invalid bulk length"},
		{"bulk CR then junk", DefaultLimits(), false, "*1\r\n$4\rxPING\r\n", "invalid bulk length"},
		{"bulk bad trailer", DefaultLimits(), false, "*1\r\n$4\r\nPINGXY", "invalid bulk length"},
		{"bulk trailer LF only", DefaultLimits(), false, "*1\r\n$4\r\nPING\n", "invalid bulk length"},
		{"multibulk 2^63-1", DefaultLimits(), false, "*9223372036854775807\r\n", "invalid multibulk length"},
		{"multibulk 20 digits", DefaultLimits(), false, "*99999999999999999999\r\n", "invalid multibulk length"},
		{"multibulk over limit", smallLimits(), false, "*9\r\n", "invalid multibulk length"},
		{"multibulk zero", DefaultLimits(), false, "*0\r\n", "invalid multibulk length"},
		{"multibulk negative", DefaultLimits(), false, "*-1\r\n", "invalid multibulk length"},
		{"multibulk empty", DefaultLimits(), false, "*\r\n", "invalid multibulk length"},
		{"multibulk leading zero", DefaultLimits(), false, "*01\r\n$4\r\nPING\r\n", "invalid multibulk length"},
		{"multibulk LF only", DefaultLimits(), false, "*1\n$4\r\nPING\r\n", "invalid multibulk length"},
		{"multibulk junk", DefaultLimits(), false, "*1x\r\n", "invalid multibulk length"},
		{"expected dollar", DefaultLimits(), false, "*1\r\n:4\r\n", "expected '$', got ':'"},
		{"expected dollar CR", DefaultLimits(), false, "*1\r\n\r\n", "expected '$', got ' '"},
		{"expected dollar second", DefaultLimits(), false, "*2\r\n$1\r\na\r\n*1\r\n", "expected '$', got '*'"},
		{"expected dollar binary", DefaultLimits(), false, "*1\r\n\xff", "expected '$', got ' '"},
		{"inline too big", smallLimits(), false, strings.Repeat("x", 201), "too big inline request"},
		{"inline too big with newline", smallLimits(), false, strings.Repeat("x", 201) + "\r\n", "too big inline request"},
		{"inline NUL never ends", smallLimits(), false, "PING\x00\r\n" + strings.Repeat("PING\r\n", 40), "too big inline request"},
		{"query buffer", smallLimits(), false, "*8\r\n" + strings.Repeat("$60\r\n"+strings.Repeat("v", 60)+"\r\n", 8), "query buffer limit exceeded"},
		{"preauth args", smallLimits(), true, "*4\r\n", "unauthenticated multibulk length"},
		{"preauth bulk", smallLimits(), true, "*1\r\n$11\r\n", "unauthenticated bulk length"},
		{"preauth bulk over limit", smallLimits(), true, "*1\r\n$101\r\n", "invalid bulk length"},
		{"preauth args over limit", smallLimits(), true, "*9\r\n", "invalid multibulk length"},
		{"quote open at end", DefaultLimits(), false, "SET k \"a b\r\n", "unbalanced quotes in request"},
		{"quote open at end escaped", DefaultLimits(), false, "SET k \"a\\\"\r\n", "unbalanced quotes in request"},
		{"quote then a letter", DefaultLimits(), false, "SET k 'a'b\r\n", "unbalanced quotes in request"},
		{"word then quote then a letter", DefaultLimits(), false, "SET k a\"b\"c\r\n", "unbalanced quotes in request"},
		{"http post", DefaultLimits(), false, "POST / HTTP/1.1\r\nHost: x\r\n\r\n*1\r\n$8\r\nFLUSHALL\r\n", ""},
		{"http post bare", DefaultLimits(), false, "post\r\n", ""},
		{"http post quoted", DefaultLimits(), false, "\"POST\" /\r\n", ""},
		{"http host", DefaultLimits(), false, "Host: 127.0.0.1:6379\r\n", ""},
		{"http host lf", DefaultLimits(), false, "  HOST:\n", ""},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1, 7, 1 << 20} {
			t.Run(tt.name+"/chunk"+strconv.Itoa(chunk), func(t *testing.T) {
				input := []byte(ok + tt.bad + "*1\r\n$4\r\nPING\r\n")
				p := newReqParser(&scriptConn{chunks: splitEvery(input, chunk)}, tt.lim)
				got := parseAll(t, p, tt.needAuth)
				if n := len(got.commands()); n != 2 {
					t.Fatalf("%d commands before the error %v, want 2", n, got.err)
				}
				var pe *ProtocolError
				if !errors.As(got.err, &pe) {
					t.Fatalf("err = %v, want a *ProtocolError", got.err)
				}
				wantReply := ""
				if tt.reply != "" {
					wantReply = "-ERR Protocol error: " + tt.reply + "\r\n"
				}
				if pe.Reply() != wantReply {
					t.Fatalf("reply %q, want %q", pe.Reply(), wantReply)
				}
				if _, err2 := p.next(false); err2 != got.err {
					t.Fatalf("next after the error: %v", err2)
				}
			})
		}
	}
}

// TestParserLimitsExact checks each limit at its value and one past it.
func TestParserLimitsExact(t *testing.T) {
	bulk := func(n int) string { return "$" + strconv.Itoa(n) + "\r\n" + strings.Repeat("b", n) + "\r\n" }
	tests := []struct {
		name     string
		needAuth bool
		in       string
		reply    string // "" when accepted
	}{
		{"bulk at limit", false, "*1\r\n" + bulk(100), ""},
		{"bulk past limit", false, "*1\r\n" + bulk(101), "invalid bulk length"},
		{"args at limit", false, "*8\r\n" + strings.Repeat(bulk(1), 8), ""},
		{"args past limit", false, "*9\r\n" + strings.Repeat(bulk(1), 9), "invalid multibulk length"},
		{"inline at limit", false, strings.Repeat("i", 200) + "\n", ""},
		{"inline past limit", false, strings.Repeat("i", 201) + "\n", "too big inline request"},
		{"query at limit", false, "*4\r\n" + strings.Repeat(bulk(91), 3) + bulk(95), ""}, // 400 bytes
		{"query past limit", false, "*4\r\n" + strings.Repeat(bulk(91), 3) + bulk(96), "query buffer limit exceeded"},
		{"preauth bulk at limit", true, "*1\r\n" + bulk(10), ""},
		{"preauth bulk past limit", true, "*1\r\n" + bulk(11), "unauthenticated bulk length"},
		{"preauth args at limit", true, "*3\r\n" + strings.Repeat(bulk(1), 3), ""},
		{"preauth args past limit", true, "*4\r\n" + strings.Repeat(bulk(1), 4), "unauthenticated multibulk length"},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1, 1 << 20} {
			t.Run(tt.name+"/chunk"+strconv.Itoa(chunk), func(t *testing.T) {
				p := newReqParser(&scriptConn{chunks: splitEvery([]byte(tt.in), chunk)}, smallLimits())
				got := parseAll(t, p, tt.needAuth)
				var pe *ProtocolError
				if tt.reply == "" {
					if got.err != io.EOF || len(got.commands()) != 1 {
						t.Fatalf("err %v, %d commands", got.err, len(got.commands()))
					}
					return
				}
				if len(got.calls) != 0 || !errors.As(got.err, &pe) || pe.Reply() != "-ERR Protocol error: "+tt.reply+"\r\n" {
					t.Fatalf("%d calls, err %v, want %q", len(got.calls), got.err, tt.reply)
				}
			})
		}
	}
}

// TestParserAuth: before authentication a call returns one command, so a
// pipelined AUTH is judged before the command after it, which the next
// call parses with the limits in force then.
func TestParserAuth(t *testing.T) {
	big := "*4\r\n" + strings.Repeat("$11\r\nhello world\r\n", 4)
	in := "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n" + big
	p := newReqParser(&scriptConn{chunks: [][]byte{[]byte(in + big)}}, smallLimits())
	cmds, err := p.next(true)
	if err != nil || len(cmds) != 1 || string(cmds[0].Args[0]) != "AUTH" {
		t.Fatalf("first call: %d commands, %v; want the AUTH alone", len(cmds), err)
	}
	if got := parseAll(t, p, false); got.err != io.EOF || len(got.calls) != 1 || len(got.commands()) != 2 {
		t.Fatalf("after AUTH: %v, %v", got.calls, got.err)
	}
	// Not authenticated, the same command is refused.
	p = newReqParser(&scriptConn{chunks: [][]byte{[]byte(big)}}, smallLimits())
	var pe *ProtocolError
	if _, err := p.next(true); !errors.As(err, &pe) || pe.what != protoUnauthMultibulk {
		t.Fatalf("before AUTH: %v", err)
	}
}

// FuzzParser feeds arbitrary bytes to the parser twice: as one buffer,
// and as reads cut at random points. The first byte seeds the cuts, the
// second's low bit applies the pre-auth limits until an AUTH command. The
// two parses give the same commands and end with the same error (io.EOF
// or a protocol error whose reply is one safe line); nothing panics, every
// command has an argument, and the buffer stays within the limits.
func FuzzParser(f *testing.F) {
	f.Add([]byte("\x00\x00*1\r\n$4\r\nPING\r\n"))
	f.Add([]byte("\x05\x01AUTH p\r\n*2\r\n$4\r\nECHO\r\n$3\r\na\r\n\r\nSET k \"a b\"\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		needAuth := data[1]&1 == 1
		input := data[2:]
		whole := parseAll(t, wholeParser(input, smallLimits()), needAuth)

		rng := rand.New(rand.NewPCG(uint64(data[0]), uint64(len(input))))
		var chunks [][]byte
		for rest := bytes.Clone(input); len(rest) > 0; {
			n := 1 + rng.IntN(min(len(rest), 1+int(data[0]%64)))
			chunks, rest = append(chunks, rest[:n:n]), rest[n:]
		}
		p := newReqParser(&scriptConn{chunks: chunks}, smallLimits())
		split := parseAll(t, p, needAuth)

		if g, w := strings.Join(split.commands(), "\n"), strings.Join(whole.commands(), "\n"); g != w {
			t.Fatalf("in reads:\n%s\nin one buffer:\n%s", g, w)
		}
		if fmt.Sprint(split.err) != fmt.Sprint(whole.err) {
			t.Fatalf("in reads: %v; in one buffer: %v", split.err, whole.err)
		}
		var pe *ProtocolError
		switch {
		case split.err == io.EOF:
		case errors.As(split.err, &pe):
			if r := pe.Reply(); r != "" && (!strings.HasPrefix(r, "-ERR Protocol error: ") || strings.Index(r, "\r\n") != len(r)-2) {
				t.Fatalf("bad reply %q", r)
			}
		default:
			t.Fatalf("ended with %v", split.err)
		}
		if cap(p.buf) > reqBufSize {
			t.Fatalf("buffer of %d bytes for commands of at most %d", cap(p.buf), smallLimits().MaxQueryBuffer)
		}
	})
}

// The tests below run the whole server.

// converse sends send (in writes of chunk bytes, then half-closes when
// shut), reads the reply, and reports whether the server closed the
// connection. It reads len(want) bytes, and then to the end when the server
// is expected to close.
func converse(t *testing.T, addr string, send []byte, chunk int, want string, wantClose, shut bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		for _, part := range splitEvery(send, chunk) {
			if _, err := c.Write(part); err != nil {
				return // the server may close first
			}
		}
		if shut {
			_ = c.(*net.TCPConn).CloseWrite()
		}
	}()
	var got []byte
	buf := make([]byte, 64<<10)
	for want == "" && !wantClose || len(got) < len(want) || wantClose {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			if !wantClose {
				t.Fatalf("read: %v after %q", err, truncate(got))
			}
			if err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("read: %v after %q, want EOF", err, truncate(got))
			}
			break
		}
		if !wantClose && len(got) >= len(want) {
			break
		}
	}
	if want != "*" && string(got) != want {
		t.Fatalf("got %q, want %q", truncate(got), truncate([]byte(want)))
	}
}

// bulkReply is the RESP2 bulk string reply of s.
func bulkReply(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

// TestProtocolThroughServer sends violations, and input at the limits, to
// the whole server: the replies before a violation, its error, the
// closed connection, and a server that answers the next client.
func TestProtocolThroughServer(t *testing.T) {
	def := startServer(t, Config{})
	bigBulk := startServer(t, Config{Limits: Limits{MaxBulk: 4 << 30, MaxQueryBuffer: 1 << 20}})
	auth := startServer(t, Config{RequirePass: "pw"})
	protoErr := func(s string) string { return "-ERR Protocol error: " + s + "\r\n" }
	ping := "*1\r\n$4\r\nPING\r\n"
	rnd := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 256<<10)
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	mib := strings.Repeat("m", 1<<20)
	noauth := "-NOAUTH Authentication required.\r\n"
	tests := []struct {
		name      string
		addr      string
		send      string
		want      string // "*": anything
		wantClose bool
		shut      bool // half-close after sending
	}{
		{"bulk 2^63-1", def, "*1\r\n$9223372036854775807\r\n", protoErr("invalid bulk length"), true, false},
		{"multibulk 2^63-1", def, "*9223372036854775807\r\n", protoErr("invalid multibulk length"), true, false},
		{"bulk over limit", def, "*1\r\n$1048577\r\n", protoErr("invalid bulk length"), true, false},
		{"bulk at limit", def, "*2\r\n$4\r\nECHO\r\n$1048576\r\n" + mib + "\r\n", bulkReply(mib), false, false},
		{"args over limit", def, "*1048577\r\n", protoErr("invalid multibulk length"), true, false},
		{"inline never ends", def, strings.Repeat("x", 100<<10), protoErr("too big inline request"), true, false},
		{"2 GB bulk streamed", def, "*1\r\n$2147483648\r\n" + strings.Repeat("z", 64<<10), protoErr("invalid bulk length"), true, false},
		{"2 GB bulk allowed, streamed", bigBulk, "*1\r\n$2147483648\r\n" + strings.Repeat("z", 2<<20), protoErr("query buffer limit exceeded"), true, false},
		{"replies before the error", def, ping + "PING\r\n" + "*1\r\n$-5\r\n" + ping, "+PONG\r\n+PONG\r\n" + protoErr("invalid bulk length"), true, false},
		{"expected dollar", def, ping + "*1\r\n:1\r\n", "+PONG\r\n" + protoErr("expected '$', got ':'"), true, false},
		{"random bytes", def, string(random), "*", true, true},
		{"http get", def, "GET / HTTP/1.1\r\nHost: 127.0.0.1:6379\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n", "-ERR wrong number of arguments for 'get' command\r\n", true, false},
		{"http post", def, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 22\r\n\r\n*1\r\n$8\r\nFLUSHALL\r\n", "", true, false},
		{"unbalanced quotes", def, ping + "SET \"a\r\n", "+PONG\r\n" + protoErr("unbalanced quotes in request"), true, false},
		{"preauth args", auth, "*11\r\n", protoErr("unauthenticated multibulk length"), true, false},
		{"preauth bulk", auth, "*1\r\n$16385\r\n", protoErr("unauthenticated bulk length"), true, false},
		{"preauth at limits", auth, "*10\r\n$4\r\nECHO\r\n" + strings.Repeat("$16384\r\n"+mib[:16384]+"\r\n", 9), noauth, false, false},
		{"auth pipelined", auth, "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*11\r\n$4\r\nECHO\r\n" + strings.Repeat("$1\r\nx\r\n", 10),
			"+OK\r\n-ERR wrong number of arguments for 'echo' command\r\n", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			converse(t, tt.addr, []byte(tt.send), 1<<20, tt.want, tt.wantClose, tt.shut)
			converse(t, tt.addr, []byte("*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n"+ping), 1<<20, "*", false, false)
		})
	}
}

// TestServerSplitWrites sends a pipeline one byte per write, and in other
// pieces, and checks the replies.
func TestServerSplitWrites(t *testing.T) {
	addr := startServer(t, Config{})
	send := "PING\r\n*2\r\n$4\r\nECHO\r\n$6\r\na\r\nb\r\n\r\nECHO \"a b\"\n\r\nECHO 'c\\'d'\r\n"
	want := "+PONG\r\n" + bulkReply("a\r\nb\r\n") + bulkReply("a b") + bulkReply("c'd")
	for _, chunk := range []int{1, 5, len(send)} {
		converse(t, addr, []byte(send), chunk, want, false, false)
	}
}
