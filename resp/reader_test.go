package resp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
)

// readAll reads r until an error and returns each read's commands, their
// arguments joined by spaces, and the error.
func readAll(t *testing.T, r *reqReader) ([][]string, error) {
	t.Helper()
	var batches [][]string
	for i := 0; ; i++ {
		if i > 1<<16 {
			t.Fatal("the reader never ends")
		}
		cmds, err := r.next()
		if err != nil {
			if len(cmds) != 0 {
				t.Fatalf("%d commands with error %v", len(cmds), err)
			}
			return batches, err
		}
		if len(cmds) == 0 {
			t.Fatal("no commands and no error")
		}
		var b []string
		for _, c := range cmds {
			b = append(b, joinArgs(c.Args))
		}
		batches = append(batches, b)
	}
}

func joinArgs(args [][]byte) string {
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = string(a)
	}
	return strings.Join(s, " ")
}

// TestReqReader parses framings in one read and in reads of every size
// down to one byte: the commands (flattened over the reads) and the final
// error do not depend on how the bytes arrive, and one read holding whole
// commands gives them all at once.
func TestReqReader(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []string // every command, its arguments joined by spaces
		err   string   // the error after them: "" for io.EOF
	}{
		{"one multibulk", "*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n", []string{"ECHO hi"}, ""},
		{"pipeline", "*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*1\r\n$4\r\nPING\r\n",
			[]string{"PING", "SET k v", "PING"}, ""},
		{"empty bulk", "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", []string{"ECHO "}, ""},
		{"payload with CRLF", "*2\r\n$4\r\nECHO\r\n$6\r\na\r\nb\r\n\r\n", []string{"ECHO a\r\nb\r\n"}, ""},
		{"binary payload", "*2\r\n$4\r\nECHO\r\n$3\r\n\x00*$\r\n", []string{"ECHO \x00*$"}, ""},
		{"inline", "PING\r\nECHO hi\n", []string{"PING", "ECHO hi"}, ""},
		{"inline quotes", "SET k \"a b\"\r\nSET k 'x\\ny'\r\nECHO \"\\x41\"\r\n", []string{"SET k a b", "SET k x\ny", "ECHO x41"}, ""},
		{"inline escapes", "ECHO \"a\\nb\"\r\n", []string{"ECHO a\nb"}, ""},
		{"empty inline lines", "\r\n\n   \r\nPING\r\n  \n", []string{"PING"}, ""},
		{"empty quoted argument", "\"\"\r\n", []string{""}, ""},
		{"inline then multibulk", "PING\r\n*1\r\n$4\r\nPING\r\nPING\r\n", []string{"PING", "PING", "PING"}, ""},
		{"unfinished at EOF", "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$5\r\nab", []string{"PING"}, ""},
		{"unfinished inline at EOF", "PING\r\nPIN", []string{"PING"}, ""},
		{"not a bulk", "*1\r\n$4\r\nPING\r\n*1\r\n+PING\r\n", []string{"PING"}, "Protocol error: invalid multibulk length"},
		{"zero multibulk", "*0\r\n", nil, "Protocol error: invalid multibulk length"},
		{"negative multibulk", "*-1\r\n", nil, "Protocol error: invalid multibulk length"},
		{"negative bulk", "*1\r\n$-1\r\n", nil, "Protocol error: invalid multibulk length"},
		{"leading zero", "*1\r\n$04\r\nPING\r\n", nil, "Protocol error: invalid multibulk length"},
		{"twenty digits", "*1\r\n$10000000000000000000\r\n", nil, "Protocol error: invalid multibulk length"},
		{"huge bulk, unfinished", "*1\r\n$9223372036854775807\r\nab", nil, ""},
		{"huge multibulk, unfinished", "*9223372036854775807\r\n$1\r\na\r\n", nil, ""},
		{"bad header end", "*1\r\r$1\r\na\r\n", nil, "Protocol error: invalid multibulk length"},
		{"no digits", "*\r\n", nil, "Protocol error: invalid multibulk length"},
		{"payload too long", "*1\r\n$1\r\nab\r\n", nil, "Protocol error: invalid multibulk length"},
		{"unbalanced quotes", "PING\r\nSET \"a\r\n", []string{"PING"}, "Protocol error: unbalanced quotes in request"},
	}
	for _, tt := range tests {
		for _, chunk := range []int{len(tt.input), 1, 2, 3, 7} {
			t.Run(fmt.Sprintf("%s/%d", tt.name, chunk), func(t *testing.T) {
				sc := &scriptConn{chunks: splitEvery([]byte(tt.input), max(chunk, 1))}
				batches, err := readAll(t, newReqReader(sc))
				var got []string
				for _, b := range batches {
					got = append(got, b...)
				}
				if strings.Join(got, "|") != strings.Join(tt.want, "|") {
					t.Errorf("commands %q, want %q", got, tt.want)
				}
				if chunk == len(tt.input) && len(batches) > 1 {
					t.Errorf("%d reads for one chunk of whole commands", len(batches))
				}
				switch {
				case tt.err == "" && err != io.EOF:
					t.Errorf("error %v, want EOF", err)
				case tt.err != "":
					var rpe *reqProtocolError
					if !errors.As(err, &rpe) || err.Error() != tt.err {
						t.Errorf("error %v, want the reader's %q", err, tt.err)
					}
				}
			})
		}
	}
}

// TestReqReaderSameAsRedcon: on random pipelines of multibulk and inline
// commands, cut into random reads, the reader gives the commands redcon's
// own reader gives.
func TestReqReaderSameAsRedcon(t *testing.T) {
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
				// Inline: words without quotes or line ends.
				w := strings.NewReplacer("\"", "", "'", "", "\r", "", "\n", "", "\\", "").Replace(word())
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
				want = append(want, joinArgs(c.Args))
			}
			if err != nil {
				break
			}
		}
		chunks := splitEvery(bytes.Clone(input), 1+rng.IntN(len(input)))
		batches, err := readAll(t, newReqReader(&scriptConn{chunks: chunks}))
		if err != io.EOF {
			t.Fatalf("round %d: %v", round, err)
		}
		var got []string
		for _, b := range batches {
			got = append(got, b...)
		}
		if strings.Join(got, "\x01") != strings.Join(want, "\x01") {
			t.Fatalf("round %d, input %q:\ngot  %q\nwant %q", round, input, got, want)
		}
	}
}

// TestReqReaderBuffer: a command larger than the buffer grows it (reads
// through the guard, as served), its arguments arrive whole, and once the
// buffer is drained the next command gets a buffer of the default size
// again; a command with many arguments does not leave its argument slice
// behind.
func TestReqReaderBuffer(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	many := make([]string, 0, 2*maxKeptArgs)
	for i := range cap(many) {
		many = append(many, fmt.Sprint(i))
	}
	var chunks [][]byte
	for _, cmd := range []string{encode("ECHO", big), encode("PING"), encode(many...), encode("PING")} {
		chunks = append(chunks, splitEvery([]byte(cmd), 1000)...)
	}
	g := NewGuardConn(&scriptConn{chunks: chunks}, DefaultLimits(), false)
	r := newReqReader(g)
	step := func(want string, bufCap int) {
		t.Helper()
		cmds, err := r.next()
		if err != nil || len(cmds) != 1 {
			t.Fatalf("%d commands, %v", len(cmds), err)
		}
		if got := joinArgs(cmds[0].Args); got != want {
			t.Fatalf("command of %d bytes, want %d", len(got), len(want))
		}
		if bufCap > 0 && cap(r.buf) != bufCap {
			t.Fatalf("buffer of %d bytes, want %d", cap(r.buf), bufCap)
		}
	}
	step("ECHO "+big, 0)
	if cap(r.buf) <= len(big) || cap(r.buf) > 4*len(big) {
		t.Fatalf("buffer of %d bytes for a command of %d", cap(r.buf), len(big))
	}
	step("PING", reqBufSize)
	step(strings.Join(many, " "), 0)
	step("PING", reqBufSize)
	if cap(r.argv) > maxKeptArgs {
		t.Fatalf("%d argument slots kept", cap(r.argv))
	}
}

// loopConn serves the same bytes on every read and discards what is
// written, counting it.
type loopConn struct {
	scriptConn
	data    []byte
	written int
	last    []byte
}

func (c *loopConn) Read(p []byte) (int, error) { return copy(p, c.data), nil }
func (c *loopConn) Write(p []byte) (int, error) {
	c.written += len(p)
	c.last = append(c.last[:0], p...)
	return len(p), nil
}

// TestPipelineNoAllocs: a connection that sends the same pipeline of
// limiter calls again and again, RL.ALL and RL.TOKEN, costs no allocation
// per pipeline in the whole path: guard, reader, dispatch, engine, replies
// and their write. It runs the server's own connection code on a loopConn.
func TestPipelineNoAllocs(t *testing.T) {
	all := []string{"RL.ALL", "3", "TOKEN", "u:1", "1000000000", "1/s", "1",
		"TOKEN", "t:1", "1000000000", "1/s", "1", "TOKEN", "g:1", "1000000000", "1/s", "1"}
	tests := []struct {
		name string
		cmd  []string
	}{
		{"RL.ALL", all},
		{"RL.TOKEN", []string{"RL.TOKEN", "u:2", "1000000000", "1/s"}},
		{"RL.TOKEN COST", []string{"RL.TOKEN", "u:3", "1000000000", "10/m", "COST", "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := engine.New(engine.Config{Stripes: 4})
			srv := NewServer(Config{}, NewLocalExecutor(eng, nil))
			lc := &loopConn{data: []byte(strings.Repeat(encode(tt.cmd...), 16))}
			c := srv.accept(NewGuardConn(lc, DefaultLimits(), false))
			run := func() {
				cmds, err := c.rd.next()
				if err != nil || len(cmds) != 16 {
					t.Fatalf("%d commands, %v", len(cmds), err)
				}
				srv.runPipeline(c, cmds)
			}
			run() // creates the keys and sizes the scratch slices
			allocs := testing.AllocsPerRun(200, run)
			if allocs != 0 {
				t.Errorf("%v allocations per pipeline of 16", allocs)
			}
			if !strings.HasPrefix(string(lc.last), "*") || strings.Count(string(lc.last), ":1\r\n") < 16 {
				t.Errorf("last write %q is not 16 allowed decisions", lc.last)
			}
		})
	}
}

var _ net.Conn = (*loopConn)(nil)

// sink keeps benchmark results alive.
var sink int

// BenchmarkReqReader parses pipelines of 16 RL.ALL calls, as served: the
// guard, then the reader; and, for comparison, the guard then redcon's
// reader, which sluice used before.
func BenchmarkReqReader(b *testing.B) {
	all := encode("RL.ALL", "3", "TOKEN", "b:all3:u:12345", "1099511627776", "1/60000ms", "1",
		"TOKEN", "b:all3:t:123", "1099511627776", "1/60000ms", "1", "TOKEN", "b:all3:g:1", "1099511627776", "1/60000ms", "1")
	data := []byte(strings.Repeat(all, 16))
	b.Run("sluice", func(b *testing.B) {
		r := newReqReader(NewGuardConn(&loopConn{data: data}, DefaultLimits(), false))
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			cmds, err := r.next()
			if err != nil {
				b.Fatal(err)
			}
			sink += len(cmds)
		}
	})
	b.Run("redcon", func(b *testing.B) {
		r := redcon.NewReader(NewGuardConn(&loopConn{data: data}, DefaultLimits(), false))
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			cmds, err := r.ReadCommands()
			if err != nil {
				b.Fatal(err)
			}
			sink += len(cmds)
		}
	})
}

// FuzzReqReader feeds arbitrary bytes to the reader alone, without the
// guard: it never panics or spins, ends with EOF or its own protocol error,
// and every command it returns has at least one argument.
func FuzzReqReader(f *testing.F) {
	f.Add([]byte("\x03*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nPING\r\n"))
	f.Add([]byte("\x00*1\r\n$9223372036854775807\r\n"))
	f.Add([]byte("\x01SET \"a\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		sc := &scriptConn{chunks: splitEvery(bytes.Clone(data[1:]), int(data[0]%32)+1)}
		r := newReqReader(sc)
		for i := 0; ; i++ {
			if i > len(data)+2 {
				t.Fatal("more reads than bytes")
			}
			cmds, err := r.next()
			if err != nil {
				var rpe *reqProtocolError
				if err != io.EOF && !errors.As(err, &rpe) {
					t.Fatalf("error %v", err)
				}
				return
			}
			for _, c := range cmds {
				if len(c.Args) == 0 {
					t.Fatal("a command without arguments")
				}
			}
		}
	})
}

// BenchmarkPipeline runs pipelines of 16 limiter calls through the
// server's connection code without a network (guard, reader, dispatch,
// engine, replies), as sluice-bench's token and all3 workloads send them:
// RL.TOKEN on one of 100k keys, or RL.ALL of three token buckets, the
// user (one of 100k), its tenant (user/100) and a shared key
// (user/10000). One b.N is one call.
func BenchmarkPipeline(b *testing.B) {
	const users, pipes = 100000, 1024
	args := func(key string) []string { return []string{key, "1099511627776", "1/60000ms", "1"} }
	build := map[string]func(rng *rand.Rand) []string{
		"token": func(rng *rand.Rand) []string {
			a := args(fmt.Sprintf("b:token:%d", rng.IntN(users)))
			return append([]string{"RL.TOKEN"}, a[:3]...)
		},
		"all3": func(rng *rand.Rand) []string {
			u := rng.IntN(users)
			cmd := []string{"RL.ALL", "3", "TOKEN"}
			cmd = append(append(cmd, args(fmt.Sprintf("b:all3:%d", u))...), "TOKEN")
			cmd = append(append(cmd, args(fmt.Sprintf("b:all3:t:%d", u/100))...), "TOKEN")
			return append(cmd, args(fmt.Sprintf("b:all3:g:%d", u/10000))...)
		},
	}
	for _, name := range []string{"token", "all3"} {
		b.Run(name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			data := make([][]byte, pipes)
			for i := range data {
				var p []byte
				for range 16 {
					p = append(p, encode(build[name](rng)...)...)
				}
				data[i] = p
			}
			eng := engine.New(engine.Config{})
			srv := NewServer(Config{}, NewLocalExecutor(eng, nil))
			lc := &loopConn{}
			c := srv.accept(NewGuardConn(lc, DefaultLimits(), false))
			i := 0
			run := func() {
				lc.data = data[i%pipes]
				i++
				cmds, err := c.rd.next()
				if err != nil || len(cmds) != 16 {
					b.Fatalf("%d commands, %v", len(cmds), err)
				}
				srv.runPipeline(c, cmds)
			}
			for range users / 16 {
				run() // most keys exist, as in a run after its warm-up
			}
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n += 16 {
				run()
			}
		})
	}
}
