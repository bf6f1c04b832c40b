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

// smallLimits makes the limits easy to reach in tests.
func smallLimits() Limits {
	return Limits{MaxBulk: 100, MaxArgs: 8, MaxInline: 200, MaxQueryBuffer: 400, PreAuthMaxBulk: 10, PreAuthMaxArgs: 3}
}

// truncate shortens b for a failure message.
func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// parsed is what a parser made of its input: each call's commands
// (quoted), and the error it ended with.
type parsed struct {
	calls [][]string
	err   error
}

// commands returns every command, flattened over the calls.
func (r parsed) commands() []string {
	var all []string
	for _, c := range r.calls {
		all = append(all, c...)
	}
	return all
}

// parseAll calls p.next until an error. With needAuth the pre-auth
// limits apply until a command AUTH has been returned.
func parseAll(t testing.TB, p *reqParser, needAuth bool) parsed {
	t.Helper()
	var r parsed
	authed := !needAuth
	for i := 0; ; i++ {
		if i > 1<<20 {
			t.Fatal("the parser never ends")
		}
		cmds, err := p.next(!authed)
		if err != nil {
			if len(cmds) != 0 {
				t.Fatalf("%d commands with error %v", len(cmds), err)
			}
			r.err = err
			return r
		}
		if len(cmds) == 0 {
			t.Fatal("no commands and no error")
		}
		var call []string
		for _, c := range cmds {
			if len(c.Args) == 0 {
				t.Fatal("a command without arguments")
			}
			call = append(call, fmt.Sprintf("%q", c.Args))
			if strings.EqualFold(string(c.Args[0]), "auth") {
				authed = true
			}
		}
		r.calls = append(r.calls, call)
	}
}

// wholeParser returns a parser whose buffer holds all of input, as read
// in one go, followed by io.EOF.
func wholeParser(input []byte, lim Limits) *reqParser {
	p := newReqParser(nil, lim)
	p.buf, p.end, p.rerr = bytes.Clone(input), len(input), io.EOF
	return p
}

// quoted renders commands as parseAll records them.
func quoted(cmds ...[]string) []string {
	var out []string
	for _, c := range cmds {
		args := make([][]byte, len(c))
		for i, a := range c {
			args[i] = []byte(a)
		}
		out = append(out, fmt.Sprintf("%q", args))
	}
	return out
}

// validCommands are well-framed commands and their arguments.
func validCommands() (wire []string, want [][]string) {
	many := make([]string, 1000)
	for i := range many {
		many[i] = "abc"
	}
	big := strings.Repeat("x", 20000)
	for _, c := range []struct {
		wire string
		args []string // nil: no command (a blank line)
	}{
		{"PING\r\n", []string{"PING"}},
		{"*1\r\n$4\r\nPING\r\n", []string{"PING"}},
		{"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n", []string{"SET", "k", ""}},
		{"*2\r\n$4\r\nECHO\r\n$6\r\na\r\nb\r\n\r\n", []string{"ECHO", "a\r\nb\r\n"}},
		{"SET k \"a b c\"\r\n", []string{"SET", "k", "a b c"}},
		{"SET k 'x\\'y'\n", []string{"SET", "k", "x'y"}},
		{"\r\n", nil},
		{"\n", nil},
		{"  GET   k  \r\n", []string{"GET", "k"}},
		{"GET / HTTP/1.1\r\n", []string{"GET", "/", "HTTP/1.1"}},
		{"SET k \"a\"\r\n", []string{"SET", "k", "a"}},
		{"SET k \"a\r\"\r\n", []string{"SET", "k", "a\r"}},
		{"SET 'it\"s' \"x\\\"y\" 'z' \n", []string{"SET", "it\"s", "x\"y", "z"}},
		{"SET '' \"\"\n", []string{"SET", "", ""}},
		{"hostname: x\r\n", []string{"hostname:", "x"}},
		{"*2\r\n$4\r\nECHO\r\n$20000\r\n" + big + "\r\n", []string{"ECHO", big}},
		{"*1000\r\n" + strings.Repeat("$3\r\nabc\r\n", 1000), many},
		{"*1\r\n$1\r\n*\r\n", []string{"*"}},
		{"$3\r\n", []string{"$3"}},
		{"DEL" + strings.Repeat(" k", 200) + "\r\n", append([]string{"DEL"}, strings.Split(strings.Repeat("k", 200), "")...)},
	} {
		wire = append(wire, c.wire)
		if c.args != nil {
			want = append(want, c.args)
		}
	}
	return wire, want
}

// TestParserPassThrough parses valid commands arriving in chunks of
// several sizes, with and without the pre-auth rule: the same commands
// each time, one per call before authentication.
func TestParserPassThrough(t *testing.T) {
	wire, want := validCommands()
	input := []byte(strings.Join(wire, ""))
	for _, chunk := range []int{len(input), 1, 13, 5000} {
		for _, preAuth := range []bool{false, true} {
			name := "chunk" + strconv.Itoa(chunk)
			if preAuth {
				name += "/preauth"
			}
			t.Run(name, func(t *testing.T) {
				lim := DefaultLimits()
				lim.PreAuthMaxBulk = 1 << 20
				lim.PreAuthMaxArgs = 1 << 20
				p := newReqParser(&scriptConn{chunks: splitEvery(bytes.Clone(input), chunk)}, lim)
				var got parsed
				for {
					// "AUTH" never comes: the pre-auth rule holds throughout.
					cmds, err := p.next(preAuth)
					if err != nil {
						got.err = err
						break
					}
					if preAuth && len(cmds) != 1 {
						t.Fatalf("%d commands in one call before authentication", len(cmds))
					}
					for _, c := range cmds {
						got.calls = append(got.calls, []string{fmt.Sprintf("%q", c.Args)})
					}
				}
				if got.err != io.EOF {
					t.Fatalf("err = %v, want EOF", got.err)
				}
				if g, w := strings.Join(got.commands(), "\n"), strings.Join(quoted(want...), "\n"); g != w {
					t.Fatalf("commands\n%s\nwant\n%s", truncate([]byte(g)), truncate([]byte(w)))
				}
			})
		}
	}
}

// TestParserEverySplit splits a pipeline at every byte, across two reads:
// the commands are those of one read, and one read of whole commands
// gives them all in one call.
func TestParserEverySplit(t *testing.T) {
	wire, _ := validCommands()
	input := []byte(strings.Join(wire[:15], ""))
	whole := parseAll(t, wholeParser(input, DefaultLimits()), false)
	if len(whole.calls) != 1 || whole.err != io.EOF {
		t.Fatalf("whole: %d calls, %v", len(whole.calls), whole.err)
	}
	for cut := 0; cut <= len(input); cut++ {
		sc := &scriptConn{chunks: [][]byte{bytes.Clone(input[:cut]), bytes.Clone(input[cut:])}}
		got := parseAll(t, newReqParser(sc, DefaultLimits()), false)
		if got.err != io.EOF || strings.Join(got.commands(), "\n") != strings.Join(whole.commands(), "\n") {
			t.Fatalf("cut %d: err %v, commands %q", cut, got.err, got.commands())
		}
	}
}

// TestParserCommands parses framings in one read and in reads of every
// size down to one byte: the commands and the final error do not depend on
// how the bytes arrive.
func TestParserCommands(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  [][]string
		err   string // the error after them: "" for io.EOF
	}{
		{"one multibulk", "*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n", [][]string{{"ECHO", "hi"}}, ""},
		{"pipeline", "*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*1\r\n$4\r\nPING\r\n",
			[][]string{{"PING"}, {"SET", "k", "v"}, {"PING"}}, ""},
		{"empty bulk", "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", [][]string{{"ECHO", ""}}, ""},
		{"payload with CRLF", "*2\r\n$4\r\nECHO\r\n$6\r\na\r\nb\r\n\r\n", [][]string{{"ECHO", "a\r\nb\r\n"}}, ""},
		{"binary payload", "*2\r\n$4\r\nECHO\r\n$3\r\n\x00*$\r\n", [][]string{{"ECHO", "\x00*$"}}, ""},
		{"inline", "PING\r\nECHO hi\n", [][]string{{"PING"}, {"ECHO", "hi"}}, ""},
		{"inline quotes", "SET k \"a b\"\r\nSET k 'x\\ny'\r\nECHO \"\\x41\"\r\n", [][]string{{"SET", "k", "a b"}, {"SET", "k", "x\\ny"}, {"ECHO", "A"}}, ""},
		{"inline escapes", "ECHO \"a\\nb\"\r\n", [][]string{{"ECHO", "a\nb"}}, ""},
		{"inline tabs", "SET\tk\t v\r\n", [][]string{{"SET", "k", "v"}}, ""},
		{"quote inside a word", "SET k a\"b c\"\r\n", [][]string{{"SET", "k", "ab c"}}, ""},
		{"empty inline lines", "\r\n\n   \r\nPING\r\n  \n", [][]string{{"PING"}}, ""},
		{"empty quoted argument", "\"\"\r\n", [][]string{{""}}, ""},
		{"inline then multibulk", "PING\r\n*1\r\n$4\r\nPING\r\nPING\r\n", [][]string{{"PING"}, {"PING"}, {"PING"}}, ""},
		{"unfinished at EOF", "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$5\r\nab", [][]string{{"PING"}}, ""},
		{"unfinished inline at EOF", "PING\r\nPIN", [][]string{{"PING"}}, ""},
		{"NUL hides the line end", "PING\r\nPING\x00\r\nPING\r\n", [][]string{{"PING"}}, ""},
		{"not a bulk", "*1\r\n$4\r\nPING\r\n*1\r\n+PING\r\n", [][]string{{"PING"}}, "Protocol error: expected '$', got '+'"},
		{"zero multibulk", "*0\r\n", nil, "Protocol error: invalid multibulk length"},
		{"negative multibulk", "*-1\r\n", nil, "Protocol error: invalid multibulk length"},
		{"negative bulk", "*1\r\n$-1\r\n", nil, "Protocol error: invalid bulk length"},
		{"leading zero", "*1\r\n$04\r\nPING\r\n", nil, "Protocol error: invalid bulk length"},
		{"twenty digits", "*1\r\n$10000000000000000000\r\n", nil, "Protocol error: invalid bulk length"},
		{"huge bulk", "*1\r\n$9223372036854775807\r\nab", nil, "Protocol error: invalid bulk length"},
		{"huge multibulk", "*9223372036854775807\r\n$1\r\na\r\n", nil, "Protocol error: invalid multibulk length"},
		{"bad header end", "*1\r\r$1\r\na\r\n", nil, "Protocol error: invalid multibulk length"},
		{"no digits", "*\r\n", nil, "Protocol error: invalid multibulk length"},
		{"payload too long", "*1\r\n$1\r\nab\r\n", nil, "Protocol error: invalid bulk length"},
		{"unbalanced quotes", "PING\r\nSET \"a\r\n", [][]string{{"PING"}}, "Protocol error: unbalanced quotes in request"},
		{"http post", "PING\r\nPOST / HTTP/1.1\r\n", [][]string{{"PING"}}, "Protocol error: possible SECURITY ATTACK detected: HTTP POST or Host: line on the RESP port"},
	}
	for _, tt := range tests {
		for _, chunk := range []int{len(tt.input), 1, 2, 3, 7} {
			t.Run(fmt.Sprintf("%s/%d", tt.name, chunk), func(t *testing.T) {
				sc := &scriptConn{chunks: splitEvery([]byte(tt.input), max(chunk, 1))}
				got := parseAll(t, newReqParser(sc, DefaultLimits()), false)
				if g, w := strings.Join(got.commands(), "|"), strings.Join(quoted(tt.want...), "|"); g != w {
					t.Errorf("commands %s, want %s", g, w)
				}
				if chunk == len(tt.input) && len(got.calls) > 1 {
					t.Errorf("%d calls for one chunk of whole commands", len(got.calls))
				}
				var pe *ProtocolError
				switch {
				case tt.err == "" && got.err != io.EOF:
					t.Errorf("error %v, want EOF", got.err)
				case tt.err != "" && (!errors.As(got.err, &pe) || got.err.Error() != tt.err):
					t.Errorf("error %v, want %q", got.err, tt.err)
				}
			})
		}
	}
}

// TestParserSameAsRedcon: on random pipelines of multibulk commands and
// inline commands of plain words, cut into random reads, the parser gives
// the commands redcon's reader gives.
func TestParserSameAsRedcon(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		const alphabet = "abAB09 \"'\\\r\n\x00*$"
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for round := range 500 {
		var in bytes.Buffer
		for range 1 + rng.IntN(20) {
			if rng.IntN(4) == 0 {
				// Inline: words without quotes, escapes, line ends or NUL.
				w := strings.NewReplacer("\"", "", "'", "", "\r", "", "\n", "", "\\", "", "\x00", "").Replace(word())
				in.WriteString("X " + w + "\r\n")
				continue
			}
			n := 1 + rng.IntN(6)
			fmt.Fprintf(&in, "*%d\r\n", n)
			for range n {
				w := word()
				fmt.Fprintf(&in, "$%d\r\n%s\r\n", len(w), w)
			}
		}
		input := in.Bytes()
		var want []string
		rd := redcon.NewReader(bytes.NewReader(input))
		for {
			cmds, err := rd.ReadCommands()
			for _, c := range cmds {
				want = append(want, fmt.Sprintf("%q", c.Args))
			}
			if err != nil {
				break
			}
		}
		chunks := splitEvery(bytes.Clone(input), 1+rng.IntN(len(input)))
		got := parseAll(t, newReqParser(&scriptConn{chunks: chunks}, DefaultLimits()), false)
		if got.err != io.EOF {
			t.Fatalf("round %d: %v", round, got.err)
		}
		if g, w := strings.Join(got.commands(), "\n"), strings.Join(want, "\n"); g != w {
			t.Fatalf("round %d, input %q:\ngot  %s\nwant %s", round, input, g, w)
		}
	}
}

// TestParserBuffer: a command larger than the buffer grows it, its
// arguments arrive whole, and once the buffer is drained the next command
// gets a buffer of the default size again; a command with many arguments
// does not leave its argument slice behind.
func TestParserBuffer(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	many := make([]string, 0, 2*maxKeptArgs)
	for i := range cap(many) {
		many = append(many, fmt.Sprint(i))
	}
	var chunks [][]byte
	for _, cmd := range []string{encode("ECHO", big), encode("PING"), encode(many...), encode("PING")} {
		chunks = append(chunks, splitEvery([]byte(cmd), 1000)...)
	}
	p := newReqParser(&scriptConn{chunks: chunks}, DefaultLimits())
	step := func(want []string, bufCap int) {
		t.Helper()
		cmds, err := p.next(false)
		if err != nil || len(cmds) != 1 {
			t.Fatalf("%d commands, %v", len(cmds), err)
		}
		if got, w := fmt.Sprintf("%q", cmds[0].Args), quoted(want)[0]; got != w {
			t.Fatalf("command of %d bytes, want %d", len(got), len(w))
		}
		if bufCap > 0 && cap(p.buf) != bufCap {
			t.Fatalf("buffer of %d bytes, want %d", cap(p.buf), bufCap)
		}
	}
	step([]string{"ECHO", big}, 0)
	if cap(p.buf) <= len(big) || cap(p.buf) > 4*len(big) {
		t.Fatalf("buffer of %d bytes for a command of %d", cap(p.buf), len(big))
	}
	step([]string{"PING"}, reqBufSize)
	step(many, 0)
	step([]string{"PING"}, reqBufSize)
	if cap(p.argv) > maxKeptArgs || cap(p.spans) > maxKeptArgs {
		t.Fatalf("%d argument slots, %d spans kept", cap(p.argv), cap(p.spans))
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

// TestParserStreamStaysSmall streams 4 MiB of valid pipelined commands,
// each read ending inside a command: the buffer stays at its default
// size, and an unfinished command is parsed once, not again from its
// start after every read (each byte is looked at a bounded number of
// times: the parser's position only moves forward).
func TestParserStreamStaysSmall(t *testing.T) {
	sc := &streamConn{pattern: []byte("*1\r\n$4\r\nPING\r\n")}
	p := newReqParser(sc, DefaultLimits())
	n := 0
	for sc.read < 4<<20 {
		cmds, err := p.next(false)
		if err != nil {
			t.Fatal(err)
		}
		n += len(cmds)
		if cap(p.buf) != reqBufSize {
			t.Fatalf("buffer of %d bytes", cap(p.buf))
		}
		if p.state == psStart || p.pos != p.end {
			t.Fatalf("after a read ending inside a command: state %d, parsed to %d of %d", p.state, p.pos, p.end)
		}
	}
	if want := int(sc.read) / len(sc.pattern); n != want {
		t.Fatalf("%d commands, want %d", n, want)
	}
}

// TestParserNoAllocs: a steady client costs the parser no allocation,
// whether each read holds whole commands or ends inside one.
func TestParserNoAllocs(t *testing.T) {
	all := encode("RL.ALL", "3", "TOKEN", "b:all3:u:12345", "1099511627776", "1/60000ms", "1",
		"TOKEN", "b:all3:t:123", "1099511627776", "1/60000ms", "1", "TOKEN", "b:all3:g:1", "1099511627776", "1/60000ms", "1")
	data := []byte(strings.Repeat(all, 16))
	for _, cut := range []int{len(data), 1000, 333, 7} {
		p := newReqParser(&cutConn{loopConn: loopConn{data: data}, cut: cut}, DefaultLimits())
		owed := 0
		run := func() { // 64 pipelines: AllocsPerRun rounds down
			for owed += 16 * 64; owed > 0; {
				cmds, err := p.next(false)
				if err != nil {
					t.Fatal(err)
				}
				owed -= len(cmds)
			}
		}
		run() // sizes the buffer and the slices
		if allocs := testing.AllocsPerRun(100, run); allocs != 0 {
			t.Errorf("reads of %d bytes: %v allocations per 1024 commands", cut, allocs)
		}
	}
}
