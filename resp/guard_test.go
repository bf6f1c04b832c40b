package resp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// scriptConn is a net.Conn whose reads return the given chunks in turn (a
// chunk may take several reads when p is smaller), then io.EOF, and whose
// writes are recorded.
type scriptConn struct {
	chunks [][]byte
	out    bytes.Buffer
}

func (c *scriptConn) Read(p []byte) (int, error) {
	for len(c.chunks) > 0 && len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	return n, nil
}

func (c *scriptConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *scriptConn) Close() error                     { return nil }
func (c *scriptConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *scriptConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }

// splitEvery cuts b into chunks of n bytes.
func splitEvery(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n:n])
		b = b[n:]
	}
	return append(out, b)
}

// drain reads g with reads of readSize bytes until an error, and returns
// what each Read passed on.
func drain(t *testing.T, g *GuardConn, readSize int) ([][]byte, error) {
	t.Helper()
	var reads [][]byte
	p := make([]byte, readSize)
	for i := 0; i < 1<<22; i++ {
		n, err := g.Read(p)
		if n > 0 {
			reads = append(reads, append([]byte(nil), p[:n]...))
		}
		if err != nil {
			return reads, err
		}
		if n == 0 {
			t.Fatal("Read returned 0, nil")
		}
	}
	t.Fatal("Read never ended")
	return nil, nil
}

// checkDeliveries checks the delivery policy: every Read ends at a command
// boundary, or holds bytes of one unfinished command only and fills p; before
// authentication, a Read holds at most one command.
func checkDeliveries(t *testing.T, reads [][]byte, cmds []string, readSize int, preAuth bool) {
	t.Helper()
	boundary := map[int]bool{}
	off := 0
	for _, c := range cmds {
		off += len(c)
		boundary[off] = true
	}
	total := off
	a := 0
	for i, r := range reads {
		b := a + len(r)
		inside := 0
		for x := a + 1; x <= b; x++ {
			if boundary[x] {
				inside++
			}
		}
		switch {
		case !boundary[b] && inside > 0:
			t.Fatalf("read %d [%d,%d) passes on a command and part of the next", i, a, b)
		case !boundary[b] && b != total && len(r) != readSize:
			t.Fatalf("read %d [%d,%d) passes on part of a command without filling p (%d)", i, a, b, readSize)
		case preAuth && inside > 1:
			t.Fatalf("read %d [%d,%d) passes on %d commands before authentication", i, a, b, inside)
		}
		a = b
	}
}

// validCommands returns well-framed commands, one per element.
func validCommands() []string {
	many := "*1000\r\n" + strings.Repeat("$3\r\nabc\r\n", 1000)
	return []string{
		"PING\r\n",
		"*1\r\n$4\r\nPING\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n",
		"*2\r\n$4\r\nECHO\r\n$6\r\na\r\nb\r\n\r\n",
		"SET k \"a b c\"\r\n",
		"SET k 'x\\'y'\n",
		"\r\n",
		"\n",
		"  GET   k  \r\n",
		"GET / HTTP/1.1\r\n",
		"SET k \"a\"\r\n",
		"SET k \"a\r\"\r\n",
		"SET 'it\"s' \"x\\\"y\" 'z' \n",
		"SET '' \"\"\n",
		"hostname: x\r\n",
		"*2\r\n$4\r\nECHO\r\n$20000\r\n" + strings.Repeat("x", 20000) + "\r\n",
		many,
		"*1\r\n$1\r\n*\r\n",
		"$3\r\n",
	}
}

func TestGuardPassThrough(t *testing.T) {
	cmds := validCommands()
	input := []byte(strings.Join(cmds, ""))
	tests := []struct {
		name      string
		chunk     int
		readSizes []int
	}{
		{"whole", len(input), []int{1, 7, 4096, 1 << 20}},
		{"bytes", 1, []int{1, 4096}},
		{"odd", 13, []int{5, 4096}},
		{"large", 5000, []int{4096, 65536}},
	}
	for _, tt := range tests {
		for _, rs := range tt.readSizes {
			for _, preAuth := range []bool{false, true} {
				name := tt.name + "/read" + strconv.Itoa(rs)
				if preAuth {
					name += "/preauth"
				}
				t.Run(name, func(t *testing.T) {
					lim := DefaultLimits()
					lim.PreAuthMaxBulk = 1 << 20
					lim.PreAuthMaxArgs = 1 << 20
					sc := &scriptConn{chunks: splitEvery(bytes.Clone(input), tt.chunk)}
					g := NewGuardConn(sc, lim, preAuth)
					reads, err := drain(t, g, rs)
					if err != io.EOF {
						t.Fatalf("err = %v, want EOF", err)
					}
					if got := bytes.Join(reads, nil); !bytes.Equal(got, input) {
						t.Fatalf("passed on %d bytes that differ from the %d sent", len(got), len(input))
					}
					if sc.out.Len() != 0 {
						t.Fatalf("wrote %q", sc.out.String())
					}
					checkDeliveries(t, reads, cmds, rs, preAuth)
				})
			}
		}
	}
}

// TestGuardPassThroughEverySplit splits a pipeline at every byte, across
// two reads of the connection.
func TestGuardPassThroughEverySplit(t *testing.T) {
	cmds := validCommands()[:10]
	input := []byte(strings.Join(cmds, ""))
	for cut := 0; cut <= len(input); cut++ {
		for _, rs := range []int{3, 4096} {
			sc := &scriptConn{chunks: [][]byte{bytes.Clone(input[:cut]), bytes.Clone(input[cut:])}}
			g := NewGuardConn(sc, DefaultLimits(), false)
			reads, err := drain(t, g, rs)
			if err != io.EOF || !bytes.Equal(bytes.Join(reads, nil), input) {
				t.Fatalf("cut %d read %d: err %v, passed on %q", cut, rs, err, bytes.Join(reads, nil))
			}
			checkDeliveries(t, reads, cmds, rs, false)
		}
	}
}

// smallLimits makes the limits easy to reach in tests.
func smallLimits() Limits {
	return Limits{MaxBulk: 100, MaxArgs: 8, MaxInline: 200, MaxQueryBuffer: 400, PreAuthMaxBulk: 10, PreAuthMaxArgs: 3}
}

func TestGuardRejects(t *testing.T) {
	const ok = "*1\r\n$4\r\nPING\r\nPING\r\n" // passed on before the bad command
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
		{"inline separators", DefaultLimits(), false, strings.Repeat(" ", 200) + strings.Repeat("x", 40000) + "\r\n", "too many separators in inline request"},
		{"inline short args", DefaultLimits(), false, "DEL" + strings.Repeat(" k", 200) + "\r\n", "too many separators in inline request"},
		{"query buffer", smallLimits(), false, "*8\r\n" + strings.Repeat("$60\r\n"+strings.Repeat("v", 60)+"\r\n", 8), "query buffer limit exceeded"},
		{"preauth args", smallLimits(), true, "*4\r\n", "unauthenticated multibulk length"},
		{"preauth bulk", smallLimits(), true, "*1\r\n$11\r\n", "unauthenticated bulk length"},
		{"preauth bulk over limit", smallLimits(), true, "*1\r\n$101\r\n", "invalid bulk length"},
		{"preauth args over limit", smallLimits(), true, "*9\r\n", "invalid multibulk length"},
		{"quote open at end", DefaultLimits(), false, "SET k \"a b\r\n", "unbalanced quotes in request"},
		{"quote open at end escaped", DefaultLimits(), false, "SET k \"a\\\"\r\n", "unbalanced quotes in request"},
		{"quote inside a word", DefaultLimits(), false, "SET k a\"b\"\r\n", "unbalanced quotes in request"},
		{"quote then a letter", DefaultLimits(), false, "SET k 'a'b\r\n", "unbalanced quotes in request"},
		{"quote then CR inside", DefaultLimits(), false, "SET k \"a\"\rb\n", "unbalanced quotes in request"},
		{"http post", DefaultLimits(), false, "POST / HTTP/1.1\r\nHost: x\r\n\r\n*1\r\n$8\r\nFLUSHALL\r\n", ""},
		{"http post bare", DefaultLimits(), false, "post\r\n", ""},
		{"http host", DefaultLimits(), false, "Host: 127.0.0.1:6379\r\n", ""},
		{"http host lf", DefaultLimits(), false, "  HOST:\n", ""},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1, 7, 1 << 20} {
			t.Run(tt.name+"/chunk"+strconv.Itoa(chunk), func(t *testing.T) {
				input := []byte(ok + tt.bad + "*1\r\n$4\r\nPING\r\n")
				sc := &scriptConn{chunks: splitEvery(input, chunk)}
				g := NewGuardConn(sc, tt.lim, tt.needAuth)
				reads, err := drain(t, g, 4096)
				// The guard may pass on part of the offending command (when it
				// is longer than a read), never all of it: redcon must parse
				// exactly the commands before it.
				got := bytes.Join(reads, nil)
				if !bytes.HasPrefix(input, got) || len(got) < len(ok) || len(got) >= len(ok)+len(tt.bad) && tt.reply != "" {
					t.Fatalf("passed on %q, want %q and at most part of the bad command", truncate(got), ok)
				}
				if n, err := redconCommands(got); n != 2 || err != io.EOF {
					t.Fatalf("redcon parses %d commands, %v, from what was passed on, want 2, EOF", n, err)
				}
				var pe *ProtocolError
				if !errors.As(err, &pe) {
					t.Fatalf("err = %v, want a *ProtocolError", err)
				}
				wantReply := ""
				if tt.reply != "" {
					wantReply = "-ERR Protocol error: " + tt.reply + "\r\n"
				}
				if sc.out.String() != wantReply {
					t.Fatalf("reply %q, want %q", sc.out.String(), wantReply)
				}
				// The error sticks, and the reply is written once.
				if n, err2 := g.Read(make([]byte, 10)); n != 0 || err2 != err || sc.out.String() != wantReply {
					t.Fatalf("second Read after the error: %d, %v, reply %q", n, err2, sc.out.String())
				}
			})
		}
	}
}

// TestGuardLimitsExact checks each limit at its value and one past it.
func TestGuardLimitsExact(t *testing.T) {
	lim := smallLimits()
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
		t.Run(tt.name, func(t *testing.T) {
			sc := &scriptConn{chunks: [][]byte{[]byte(tt.in)}}
			g := NewGuardConn(sc, lim, tt.needAuth)
			reads, err := drain(t, g, 4096)
			got := string(bytes.Join(reads, nil))
			if tt.reply == "" {
				if err != io.EOF || got != tt.in || sc.out.Len() != 0 {
					t.Fatalf("err %v, passed on %q, reply %q", err, got, sc.out.String())
				}
				return
			}
			if got != "" || sc.out.String() != "-ERR Protocol error: "+tt.reply+"\r\n" {
				t.Fatalf("passed on %q, reply %q, want %q", truncate([]byte(got)), sc.out.String(), tt.reply)
			}
		})
	}
}

// TestGuardSetAuthenticated checks that the limits switch at the next Read,
// and that a pipelined AUTH is judged before the command after it.
func TestGuardSetAuthenticated(t *testing.T) {
	big := "*4\r\n" + strings.Repeat("$11\r\nhello world\r\n", 4)
	in := "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n" + big
	sc := &scriptConn{chunks: [][]byte{[]byte(in + big)}}
	g := NewGuardConn(sc, smallLimits(), true)
	p := make([]byte, 4096)
	n, err := g.Read(p)
	if err != nil || string(p[:n]) != "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n" {
		t.Fatalf("first Read: %q, %v; want the AUTH alone", p[:n], err)
	}
	g.SetAuthenticated(true)
	reads, err := drain(t, g, 4096)
	if err != io.EOF || string(bytes.Join(reads, nil)) != big+big {
		t.Fatalf("after AUTH: %q, %v", bytes.Join(reads, nil), err)
	}
	// And back: SetAuthenticated(false) restores the pre-auth limits.
	sc = &scriptConn{chunks: [][]byte{[]byte(big)}}
	g = NewGuardConn(sc, smallLimits(), true)
	g.SetAuthenticated(true)
	g.SetAuthenticated(false)
	if _, err := drain(t, g, 4096); sc.out.String() != "-ERR Protocol error: unauthenticated multibulk length\r\n" {
		t.Fatalf("after SetAuthenticated(false): %v, reply %q", err, sc.out.String())
	}
	// Without needAuth the pre-auth limits never apply.
	sc = &scriptConn{chunks: [][]byte{[]byte(big)}}
	g = NewGuardConn(sc, smallLimits(), false)
	if _, err := drain(t, g, 4096); err != io.EOF {
		t.Fatalf("needAuth false: %v", err)
	}
}

// streamConn endlessly returns a pipeline of PINGs, every read ending two
// bytes into a command (as a client pacing its writes can arrange).
type streamConn struct {
	scriptConn
	pattern []byte
	off     int
	read    int64
}

func (c *streamConn) Read(p []byte) (int, error) {
	n, l := min(len(p), 4096), len(c.pattern)
	if n > l {
		n -= ((c.off+n)%l - 2 + l) % l
	}
	for i := range n {
		p[i] = c.pattern[c.off]
		c.off = (c.off + 1) % len(c.pattern)
	}
	c.read += int64(n)
	return n, nil
}

// TestGuardBoundsRedconBuffer streams 4 MiB of valid pipelined commands, each
// read ending mid-command, through redcon's reader. Unguarded, redcon keeps
// every byte (its buffer only doubles); guarded, its buffer stays small.
func TestGuardBoundsRedconBuffer(t *testing.T) {
	const total = 4 << 20
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	run := func(guarded bool) uint64 {
		sc := &streamConn{pattern: []byte("*1\r\n$4\r\nPING\r\n")}
		var conn net.Conn = sc
		if guarded {
			conn = NewGuardConn(sc, DefaultLimits(), false)
		}
		before := heap()
		rd := redcon.NewReader(conn)
		for sc.read < total {
			if _, err := rd.ReadCommands(); err != nil {
				t.Fatal(err)
			}
		}
		after := heap()
		runtime.KeepAlive(rd)
		if after < before {
			return 0
		}
		return after - before
	}
	unguarded := run(false)
	guarded := run(true)
	t.Logf("heap growth after %d MiB: unguarded %d KiB, guarded %d KiB", total>>20, unguarded>>10, guarded>>10)
	if guarded > 1<<20 {
		t.Fatalf("redcon's buffer grew by %d KiB behind the guard", guarded>>10)
	}
}

// echoHandler replies to every command with its arguments, and to AUTH by
// authenticating the connection.
func echoHandler(conn redcon.Conn, cmd redcon.Command) {
	if strings.EqualFold(string(cmd.Args[0]), "auth") {
		if g, ok := conn.NetConn().(*GuardConn); ok {
			g.SetAuthenticated(true)
		}
		conn.WriteString("OK")
		return
	}
	conn.WriteArray(len(cmd.Args))
	for _, a := range cmd.Args {
		conn.WriteBulk(a)
	}
}

// echoReply is echoHandler's reply to args.
func echoReply(args ...string) string {
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	return b.String()
}

// startEchoServer serves echoHandler with redcon behind the guard.
func startEchoServer(t *testing.T, lim Limits, needAuth bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := redcon.NewServerNetwork("tcp", ln.Addr().String(), echoHandler, nil, nil)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(NewGuardListener(ln, lim, needAuth)) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

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

// truncate shortens b for a failure message.
func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// checkAlive checks that the server still answers a new connection.
func checkAlive(t *testing.T, addr string) {
	t.Helper()
	converse(t, addr, []byte("*1\r\n$4\r\nPING\r\n"), 1<<20, echoReply("PING"), false, false)
}

func TestGuardRedcon(t *testing.T) {
	def := startEchoServer(t, DefaultLimits(), false)
	bigBulk := startEchoServer(t, Limits{MaxBulk: 4 << 30, MaxQueryBuffer: 1 << 20}, false)
	auth := startEchoServer(t, DefaultLimits(), true)
	protoErr := func(s string) string { return "-ERR Protocol error: " + s + "\r\n" }
	ping := "*1\r\n$4\r\nPING\r\n"
	rnd := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 256<<10)
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	mib := strings.Repeat("m", 1<<20)
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
		{"bulk at limit", def, "*1\r\n$1048576\r\n" + mib + "\r\n", echoReply(mib), false, false},
		{"args over limit", def, "*1048577\r\n", protoErr("invalid multibulk length"), true, false},
		{"inline never ends", def, strings.Repeat("x", 100<<10), protoErr("too big inline request"), true, false},
		{"2 GB bulk streamed", def, "*1\r\n$2147483648\r\n" + strings.Repeat("z", 64<<10), protoErr("invalid bulk length"), true, false},
		{"2 GB bulk allowed, streamed", bigBulk, "*1\r\n$2147483648\r\n" + strings.Repeat("z", 2<<20), protoErr("query buffer limit exceeded"), true, false},
		{"replies before the error", def, ping + "PING\r\n" + "*1\r\n$-5\r\n" + ping, echoReply("PING") + echoReply("PING") + protoErr("invalid bulk length"), true, false},
		{"expected dollar", def, ping + "*1\r\n:1\r\n", echoReply("PING") + protoErr("expected '$', got ':'"), true, false},
		{"random bytes", def, string(random), "*", true, true},
		{"http get", def, "GET / HTTP/1.1\r\nHost: 127.0.0.1:6379\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n", echoReply("GET", "/", "HTTP/1.1"), true, false},
		{"http post", def, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 22\r\n\r\n*1\r\n$8\r\nFLUSHALL\r\n", "", true, false},
		{"unbalanced quotes (redcon's)", def, ping + "SET \"a\r\n", echoReply("PING") + protoErr("unbalanced quotes in request"), true, false},
		{"preauth args", auth, "*11\r\n", protoErr("unauthenticated multibulk length"), true, false},
		{"preauth bulk", auth, "*1\r\n$16385\r\n", protoErr("unauthenticated bulk length"), true, false},
		{"preauth at limits", auth, "*10\r\n" + strings.Repeat("$16384\r\n"+mib[:16384]+"\r\n", 10), echoReply(strings.Split(strings.Repeat(mib[:16384]+",", 10), ",")[:10]...), false, false},
		{"auth pipelined", auth, "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*11\r\n" + strings.Repeat("$1\r\nx\r\n", 11),
			"+OK\r\n" + echoReply(strings.Split(strings.Repeat("x", 11), "")...), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			converse(t, tt.addr, []byte(tt.send), 1<<20, tt.want, tt.wantClose, tt.shut)
			checkAlive(t, tt.addr)
		})
	}
}

// TestGuardRedconSplitWrites sends a pipeline to redcon one byte per write
// and checks the replies.
func TestGuardRedconSplitWrites(t *testing.T) {
	addr := startEchoServer(t, DefaultLimits(), false)
	send := "PING\r\n*2\r\n$4\r\nECHO\r\n$6\r\na\r\nb\r\n\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\nSET k \"a b\"\n\r\n"
	want := echoReply("PING") + echoReply("ECHO", "a\r\nb\r\n") + echoReply("SET", "k", "") + echoReply("SET", "k", "a b")
	for _, chunk := range []int{1, 5, len(send)} {
		converse(t, addr, []byte(send), chunk, want, false, false)
	}
}

// FuzzGuard feeds arbitrary bytes through a GuardConn with the server's
// request reader on top, as in production. The first bytes of the input
// choose the read sizes and the auth state. It checks that nothing panics,
// that the guard passes on a prefix of the input, that the reader never
// meets a framing error behind the guard, that redcon's reader parses the
// same commands from the bytes passed on (the guard's rules are redcon's,
// and the reader splits inline commands with redcon's tokenizer), and that
// an error reply is one safe line.
func FuzzGuard(f *testing.F) {
	f.Add([]byte("\x00\x00*1\r\n$4\r\nPING\r\n"))
	f.Add([]byte("\x05\x01AUTH p\r\n*2\r\n$4\r\nECHO\r\n$3\r\na\r\n\r\nSET k \"a b\"\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		chunk := int(data[0]%64) + 1
		needAuth := data[1]&1 == 1
		input := data[2:]
		sc := &scriptConn{chunks: splitEvery(bytes.Clone(input), chunk)}
		g := NewGuardConn(sc, smallLimits(), needAuth)
		rec := &recordReader{r: g}
		rd := newReqReader(rec)
		var got []string
		var err error
		for i := 0; i < 1<<16 && err == nil; i++ {
			var cmds []redcon.Command
			cmds, err = rd.next()
			for _, c := range cmds {
				got = append(got, fmt.Sprintf("%q", c.Args))
				if strings.EqualFold(string(c.Args[0]), "auth") {
					g.SetAuthenticated(true)
				}
			}
		}
		if !bytes.HasPrefix(input, rec.got.Bytes()) {
			t.Fatalf("passed on %q, not a prefix of the input", rec.got.Bytes())
		}
		var pe *ProtocolError
		switch {
		case err == io.EOF:
			if rec.got.Len() != len(input) {
				t.Fatalf("EOF after passing on %d of %d bytes", rec.got.Len(), len(input))
			}
		case errors.As(err, &pe):
		default:
			t.Fatalf("the request reader ended with %v behind the guard", err)
		}
		var want []string
		rc := redcon.NewReader(bytes.NewReader(rec.got.Bytes()))
		for {
			cmds, err := rc.ReadCommands()
			for _, c := range cmds {
				want = append(want, fmt.Sprintf("%q", c.Args))
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("redcon's reader ended with %v on what the guard passed on", err)
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("the reader parsed\n%s\nredcon's reader\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if out := sc.out.String(); out != "" {
			if !strings.HasPrefix(out, "-ERR Protocol error: ") || strings.Index(out, "\r\n") != len(out)-2 {
				t.Fatalf("bad reply %q", out)
			}
		}
	})
}

// redconCommands counts the commands redcon's reader parses from b, and
// returns the error it ends with.
func redconCommands(b []byte) (int, error) {
	rd := redcon.NewReader(bytes.NewReader(b))
	n := 0
	for {
		cmds, err := rd.ReadCommands()
		n += len(cmds)
		if err != nil {
			return n, err
		}
	}
}

// recordReader records what passes through it.
type recordReader struct {
	r   io.Reader
	got bytes.Buffer
}

func (r *recordReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.got.Write(p[:n])
	return n, err
}

// BenchmarkGuard measures the guard alone on a pipeline of typical limiter
// commands, read in 16 KiB reads.
func BenchmarkGuard(b *testing.B) {
	cmd := "*4\r\n$8\r\nRL.TOKEN\r\n$12\r\nuser:1234567\r\n$3\r\n100\r\n$4\r\n10/s\r\n"
	input := []byte(strings.Repeat(cmd, (64<<10)/len(cmd)))
	p := make([]byte, 16<<10)
	b.SetBytes(int64(len(input)))
	b.ReportAllocs()
	for b.Loop() {
		g := NewGuardConn(&scriptConn{chunks: [][]byte{input}}, DefaultLimits(), false)
		for {
			if _, err := g.Read(p); err != nil {
				break
			}
		}
	}
}

// TestFramerWholeBulkSameAsByteByByte: the framer's fast path for a whole
// bulk argument gives what the byte-by-byte states give (run here by
// feeding one byte at a time, where the fast path never applies): the same
// last command boundary, error, and bytes consumed when no error, on valid
// and broken input and at the limits.
func TestFramerWholeBulkSameAsByteByByte(t *testing.T) {
	limits := []frameLimits{
		{maxArgs: 20, maxBulk: 100, maxInline: 200, maxQuery: 400, authArgs: math.MaxUint64, authBulk: math.MaxUint64},
		{maxArgs: 20, maxBulk: 100, maxInline: 200, maxQuery: 400, authArgs: 3, authBulk: 10},
		{maxArgs: 20, maxBulk: 1 << 40, maxInline: 200, maxQuery: 60, authArgs: math.MaxUint64, authBulk: math.MaxUint64},
		{maxArgs: 20, maxBulk: 100, maxInline: 200, maxQuery: 400, authArgs: math.MaxUint64, authBulk: math.MaxUint64, preAuth: true},
	}
	inputs := []string{
		"*3\r\n$6\r\nRL.ALL\r\n$1\r\n3\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n",
		"*2\r\n$3\r\nGET\r\n$10\r\n0123456789\r\n*2\r\n$3\r\nGET\r\n$11\r\n0123456789a\r\n",
		"*1\r\n$04\r\nPING\r\n", "*1\r\n$00\r\n\r\n", "*1\r\n$\r\n\r\n", "*1\r\n$-1\r\n",
		"*1\r\n$4\rxPING\r\n", "*1\r\n$4\r\nPINGx\n", "*1\r\n$4\r\nPING\rx", "*1\r\n$4\r\nPING\r\n$",
		"*1\r\n$101\r\n" + strings.Repeat("x", 101) + "\r\n",
		"*1\r\n$12345678901234567890\r\nx\r\n", "*1\r\n$1234567890123456789\r\nx\r\n",
		"*1\r\n$99999999999999999999999\r\n",
		"*2\r\n$50\r\n" + strings.Repeat("y", 50) + "\r\n$1\r\nz\r\n",
		"*1\r\n$4\r\nPI", "*2\r\n$4\r\nPING\r\nPING\r\n",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 { // random mutations of the inputs above
		b := []byte(inputs[rng.IntN(len(inputs))])
		for range 1 + rng.IntN(3) {
			b[rng.IntN(len(b))] = "*$\r\n0123456789x"[rng.IntN(15)]
		}
		inputs = append(inputs, string(b))
	}
	type outcome struct {
		consumed, last int // last: past the last command boundary
		err            string
	}
	run := func(in string, l frameLimits, step int) outcome {
		var f framer
		o := outcome{last: -1}
		for off := 0; off < len(in); {
			end := min(off+step, len(in))
			n, last, err := f.scan([]byte(in[off:end]), &l)
			if last >= 0 {
				o.last = off + last
			}
			o.consumed = off + n
			if err != nil {
				o.err = err.Error()
				break
			}
			if n == 0 {
				break
			}
			off += n
		}
		return o
	}
	for _, l := range limits {
		for _, in := range inputs {
			whole, one := run(in, l, len(in)), run(in, l, 1)
			if whole.err != "" {
				// Where within a payload a limit is found depends on
				// the reads, with or without the fast path.
				whole.consumed, one.consumed = 0, 0
			}
			if whole != one {
				t.Fatalf("%+v %q: whole %+v, byte by byte %+v", l, in, whole, one)
			}
		}
	}
}
