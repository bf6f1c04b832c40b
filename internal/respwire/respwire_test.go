package respwire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// vector is one case of testdata/replies.txt.
type vector struct {
	line              int
	wire              string
	lengths, noLength string // the two renderings, when valid
	err               string // a piece of the error, when not
}

// loadVectors parses testdata/replies.txt.
func loadVectors(t *testing.T) []vector {
	t.Helper()
	data, err := os.ReadFile("testdata/replies.txt")
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	for i, line := range strings.Split(string(data), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		var fields []string
		for _, f := range strings.Split(line, "\t") {
			s, err := strconv.Unquote(f)
			if err != nil {
				t.Fatalf("replies.txt:%d: field %s: %v", i+1, f, err)
			}
			fields = append(fields, s)
		}
		if len(fields) != 3 {
			t.Fatalf("replies.txt:%d: %d fields, want 3", i+1, len(fields))
		}
		v := vector{line: i + 1, wire: fields[0]}
		if fields[1] == "error" {
			v.err = fields[2]
		} else {
			v.lengths, v.noLength = fields[1], fields[2]
		}
		vs = append(vs, v)
	}
	return vs
}

func TestReadVectors(t *testing.T) {
	vs := loadVectors(t)
	if len(vs) < 50 {
		t.Fatalf("only %d vectors", len(vs))
	}
	for _, v := range vs {
		got, err := Read(bufio.NewReader(strings.NewReader(v.wire)), Limits{})
		if v.err != "" {
			if err == nil || !strings.Contains(err.Error(), v.err) {
				t.Errorf("replies.txt:%d: Read(%q) = %s, %v; want an error with %q", v.line, v.wire, got, err, v.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("replies.txt:%d: Read(%q): %v", v.line, v.wire, err)
			continue
		}
		if s := got.Text(WithLengths); s != v.lengths {
			t.Errorf("replies.txt:%d: Text(WithLengths) = %q, want %q", v.line, s, v.lengths)
		}
		if s := got.Text(NoLengths); s != v.noLength {
			t.Errorf("replies.txt:%d: Text(NoLengths) = %q, want %q", v.line, s, v.noLength)
		}
		if s := got.String(); s != v.lengths {
			t.Errorf("replies.txt:%d: String() = %q, want %q", v.line, s, v.lengths)
		}
	}
}

// TestReadValues checks the structured value of every kind.
func TestReadValues(t *testing.T) {
	cases := []struct {
		wire string
		want Value
	}{
		{"+OK\r\n", Value{Kind: SimpleString, Str: "OK"}},
		{"-ERR x\r\n", Value{Kind: SimpleError, Str: "ERR x"}},
		{":-42\r\n", Value{Kind: Integer, Int: -42}},
		{"$3\r\nfoo\r\n", Value{Kind: BulkString, Str: "foo"}},
		{"$-1\r\n", Value{Kind: BulkString, Null: true}},
		{"*-1\r\n", Value{Kind: Array, Null: true}},
		{"*0\r\n", Value{Kind: Array, Elems: []Value{}}},
		{"_\r\n", Value{Kind: Null}},
		{",1.5\r\n", Value{Kind: Double, Str: "1.5"}},
		{"#t\r\n", Value{Kind: Boolean, Int: 1}},
		{"#f\r\n", Value{Kind: Boolean}},
		{"(-123\r\n", Value{Kind: BigNumber, Str: "-123"}},
		{"!3\r\nERR\r\n", Value{Kind: BulkError, Str: "ERR"}},
		{"=7\r\ntxt:abc\r\n", Value{Kind: VerbatimString, Str: "txt:abc"}},
		{"*2\r\n:1\r\n*1\r\n$1\r\na\r\n", Value{Kind: Array, Elems: []Value{
			{Kind: Integer, Int: 1},
			{Kind: Array, Elems: []Value{{Kind: BulkString, Str: "a"}}},
		}}},
		{"%1\r\n+k\r\n_\r\n", Value{Kind: Map, Elems: []Value{{Kind: SimpleString, Str: "k"}, {Kind: Null}}}},
		{"~1\r\n:1\r\n", Value{Kind: Set, Elems: []Value{{Kind: Integer, Int: 1}}}},
		{">1\r\n+x\r\n", Value{Kind: Push, Elems: []Value{{Kind: SimpleString, Str: "x"}}}},
	}
	for _, tc := range cases {
		got, err := Read(bufio.NewReader(strings.NewReader(tc.wire)), Limits{})
		if err != nil {
			t.Errorf("Read(%q): %v", tc.wire, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Read(%q) = %#v, want %#v", tc.wire, got, tc.want)
		}
		if null := tc.want.Null || tc.want.Kind == Null; got.IsNull() != null {
			t.Errorf("Read(%q).IsNull() = %v", tc.wire, !null)
		}
	}
}

// TestReadStream: replies follow one another on a stream, and a clean end
// between two is io.EOF.
func TestReadStream(t *testing.T) {
	rd := bufio.NewReader(strings.NewReader("+a\r\n$1\r\nb\r\n*1\r\n:3\r\n"))
	var got []string
	for {
		v, err := Read(rd, Limits{})
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v.String())
	}
	if want := []string{"+a", "$1 b", "*1 [:3]"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("replies %q, want %q", got, want)
	}
}

// nested returns n arrays of one element each around a scalar.
func nested(n int) string {
	return strings.Repeat("*1\r\n", n) + ":1\r\n"
}

func TestLimits(t *testing.T) {
	cases := []struct {
		name string
		wire string
		lim  Limits
		err  string // "" for no error
	}{
		{"default depth", nested(DefaultMaxDepth), Limits{}, ""},
		{"default depth+1", nested(DefaultMaxDepth + 1), Limits{}, "nested deeper than 16"},
		{"deep attack", nested(1 << 16), Limits{}, "nested deeper than 16"},
		{"depth 2", nested(2), Limits{MaxDepth: 2}, ""},
		{"depth 3 of 2", nested(3), Limits{MaxDepth: 2}, "nested deeper than 2"},
		{"map depth", "%1\r\n+k\r\n" + nested(2), Limits{MaxDepth: 2}, "nested deeper than 2"},
		{"bulk at max", "$4\r\nabcd\r\n", Limits{MaxBulk: 4}, ""},
		{"bulk over max", "$5\r\nabcde\r\n", Limits{MaxBulk: 4}, "length over the limit of 4"},
		{"line at max", "+abc\r\n", Limits{MaxBulk: 4}, ""},
		{"line over max", "+abcd\r\n", Limits{MaxBulk: 4}, "line longer than 4 bytes"},
		{"long line", "+" + strings.Repeat("x", 10000) + "\r\n", Limits{}, ""},
		{"long line over max", "+" + strings.Repeat("x", 10000) + "\r\n", Limits{MaxBulk: 9000}, "line longer than 9000 bytes"},
		{"endless line", "+" + strings.Repeat("x", 100000), Limits{MaxBulk: 9000}, "line longer than 9000 bytes"},
		{"elements at max", "*2\r\n:1\r\n:2\r\n", Limits{MaxElems: 2}, ""},
		{"elements over max", "*3\r\n:1\r\n:2\r\n:3\r\n", Limits{MaxElems: 2}, "length over the limit of 2"},
		{"map pairs at max", "%2\r\n:1\r\n:2\r\n:3\r\n:4\r\n", Limits{MaxElems: 2}, ""},
		{"set over max", "~3\r\n", Limits{MaxElems: 2}, "length over the limit of 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(bufio.NewReader(strings.NewReader(tc.wire)), tc.lim)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Read: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Read: %v, want an error with %q", err, tc.err)
			case tc.err != "":
				var pe *ProtocolError
				if !errors.As(err, &pe) {
					t.Fatalf("Read: %T %v, want a *ProtocolError", err, err)
				}
			}
		})
	}
}

// TestHugeDeclaredLengths: a header that declares the most the limits
// allow, followed by little, costs what arrives, not what it declares.
func TestHugeDeclaredLengths(t *testing.T) {
	for _, wire := range []string{
		"$" + strconv.Itoa(DefaultMaxBulk) + "\r\nabc",
		"*" + strconv.Itoa(DefaultMaxElems) + "\r\n:1\r\n",
		"%" + strconv.Itoa(DefaultMaxElems) + "\r\n:1\r\n",
		strings.Repeat("*"+strconv.Itoa(DefaultMaxElems)+"\r\n", DefaultMaxDepth) + ":1\r\n",
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Read(bufio.NewReader(strings.NewReader(wire)), Limits{})
		runtime.ReadMemStats(&after)
		if err != io.ErrUnexpectedEOF {
			t.Errorf("Read(%.30q...): %v, want io.ErrUnexpectedEOF", wire, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 2<<20 {
			t.Errorf("Read(%.30q...) allocated %d bytes", wire, n)
		}
	}
}

// TestLargeBulk: a bulk string larger than the first allocation arrives
// whole, in pieces.
func TestLargeBulk(t *testing.T) {
	payload := strings.Repeat("0123456789", 100000)
	wire := "$" + strconv.Itoa(len(payload)) + "\r\n" + payload + "\r\n"
	v, err := Read(bufio.NewReader(io.MultiReader(strings.NewReader(wire[:5000]), strings.NewReader(wire[5000:]))), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if v.Kind != BulkString || v.Str != payload {
		t.Fatalf("Read: kind %q, %d bytes; want the %d-byte payload", v.Kind, len(v.Str), len(payload))
	}
}

func TestAppendCommand(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{nil, "*0\r\n"},
		{[]string{"PING"}, "*1\r\n$4\r\nPING\r\n"},
		{[]string{"RL.TOKEN", "k", "4", "4/m"}, "*4\r\n$8\r\nRL.TOKEN\r\n$1\r\nk\r\n$1\r\n4\r\n$3\r\n4/m\r\n"},
		{[]string{"SET", "", "a\r\nb"}, "*3\r\n$3\r\nSET\r\n$0\r\n\r\n$4\r\na\r\nb\r\n"},
	}
	for _, tc := range cases {
		got := AppendCommand([]byte("prefix"), tc.args...)
		if string(got) != "prefix"+tc.want {
			t.Errorf("AppendCommand(%q) = %q, want %q", tc.args, got, tc.want)
		}
		// A command reads back as an array of its bulk strings.
		v, err := Read(bufio.NewReader(strings.NewReader(tc.want)), Limits{})
		if err != nil {
			t.Fatalf("Read(%q): %v", tc.want, err)
		}
		if v.Kind != Array || len(v.Elems) != len(tc.args) {
			t.Fatalf("Read(%q) = %s", tc.want, v)
		}
		for i, e := range v.Elems {
			if e.Kind != BulkString || e.Str != tc.args[i] {
				t.Fatalf("Read(%q) element %d = %s, want %q", tc.want, i, e, tc.args[i])
			}
		}
	}
}

// TestTextOfBuiltValues: Text works on values built by hand, not only on
// those Read returns.
func TestTextOfBuiltValues(t *testing.T) {
	cases := []struct {
		v    Value
		want string
	}{
		{Value{Kind: Array, Elems: nil}, "*0 []"},
		{Value{Kind: Map, Null: true}, "*-1"},
		{Value{Kind: VerbatimString, Null: true}, "$-1"},
		{Value{Kind: Boolean, Int: 7}, "#t"},
		{Value{Kind: Integer, Int: -1}, ":-1"},
	}
	for _, tc := range cases {
		if got := tc.v.Text(WithLengths); got != tc.want {
			t.Errorf("%#v.Text = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// TestConn runs Do against a scripted server.
func TestConn(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	c := NewConn(client)
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		rd := bufio.NewReader(server)
		cmd, err := Read(rd, Limits{})
		if err != nil {
			done <- err
			return
		}
		if cmd.String() != "*2 [$4 ECHO $2 hi]" {
			done <- errors.New("server got " + cmd.String())
			return
		}
		_, err = server.Write([]byte("$2\r\nhi\r\n"))
		done <- err
	}()
	v, err := c.Do(time.Second, "ECHO", "hi")
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Text(NoLengths); got != "$hi" {
		t.Fatalf("Do = %q, want %q", got, "$hi")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Nothing more comes: Do fails within its timeout.
	start := time.Now()
	_, err = c.Do(50*time.Millisecond, "PING")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Do without an answer: %v, want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Do without an answer took %v", d)
	}
}

// TestConnLimits: a Conn applies its Limits.
func TestConnLimits(t *testing.T) {
	c := &Conn{Reader: bufio.NewReader(bytes.NewReader([]byte(nested(3)))), Limits: Limits{MaxDepth: 2}}
	var pe *ProtocolError
	if _, err := c.ReadReply(); !errors.As(err, &pe) {
		t.Fatalf("ReadReply: %v, want a *ProtocolError", err)
	}
}

// TestSkipVectors: Skip accepts and rejects what Read does, consumes the
// same bytes (the reply after it reads intact), and ReadLine with SkipRest
// is Skip in two steps.
func TestSkipVectors(t *testing.T) {
	const next = "+NEXT\r\n"
	for _, v := range loadVectors(t) {
		for _, split := range []bool{false, true} {
			wire := v.wire
			if v.err == "" {
				wire += next // a truncated reply must stay truncated
			}
			rd := bufio.NewReader(strings.NewReader(wire))
			var err error
			if split {
				var line []byte
				if line, err = ReadLine(rd, Limits{}); err == nil {
					err = SkipRest(rd, Limits{}, line)
				}
			} else {
				err = Skip(rd, Limits{})
			}
			if v.err != "" {
				if err == nil || !strings.Contains(err.Error(), v.err) {
					t.Errorf("replies.txt:%d: Skip(%q) (split %v) = %v; want an error with %q", v.line, v.wire, split, err, v.err)
				}
				continue
			}
			if err != nil {
				t.Errorf("replies.txt:%d: Skip(%q) (split %v): %v", v.line, v.wire, split, err)
				continue
			}
			if got, err := Read(rd, Limits{}); err != nil || got.Str != "NEXT" {
				t.Errorf("replies.txt:%d: after Skip(%q) (split %v): %v %v, want NEXT", v.line, v.wire, split, got, err)
			}
		}
	}
}

// TestSkipAllocatesNothing for replies whose lines fit the buffer, however
// long their strings.
func TestSkipAllocatesNothing(t *testing.T) {
	big := strings.Repeat("x", 100_000)
	for _, wire := range []string{
		"*5\r\n:1\r\n:10\r\n:9\r\n:0\r\n:100\r\n",
		"%2\r\n+a\r\n#t\r\n$3\r\nabc\r\n*2\r\n,1.5\r\n_\r\n",
		"$" + strconv.Itoa(len(big)) + "\r\n" + big + "\r\n",
		"=7\r\ntxt:abc\r\n",
		"-ERR some long error text that would cost a string in Read\r\n",
	} {
		r := strings.NewReader(wire)
		rd := bufio.NewReader(r)
		if n := testing.AllocsPerRun(100, func() {
			r.Reset(wire)
			rd.Reset(r)
			if err := Skip(rd, Limits{}); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("Skip(%.40q): %v allocations, want 0", wire, n)
		}
	}
}

// TestParseInt agrees with strconv.ParseInt(s, 10, 64) on what it accepts
// and what it returns.
func TestParseInt(t *testing.T) {
	for _, s := range []string{
		"0", "1", "-1", "+1", "-0", "42", "007", "", "-", "+", "1x", "x1", " 1", "1 ", "1_000", "0x10",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		"18446744073709551615", "99999999999999999999", "1234567890123456789", "-1234567890123456789",
		"+9223372036854775807", "1e3", "--1",
	} {
		want, err := strconv.ParseInt(s, 10, 64)
		got, ok := ParseInt([]byte(s))
		if ok != (err == nil) || (ok && got != want) {
			t.Errorf("ParseInt(%q) = %d, %v; strconv says %d, %v", s, got, ok, want, err)
		}
	}
}

// TestPipeline: commands appended go out in one Flush, in order, and their
// replies come back in order.
func TestPipeline(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	c := NewConn(client)
	defer c.Close()
	c.Append("ECHO", "a")
	c.AppendRaw(AppendCommand(nil, "PING"))
	go c.Flush() // net.Pipe is synchronous: the write waits for the reads below
	rd := bufio.NewReader(server)
	for _, want := range []string{"*2 [$4 ECHO $1 a]", "*1 [$4 PING]"} {
		if cmd, err := Read(rd, Limits{}); err != nil || cmd.String() != want {
			t.Fatalf("server got %v, %v; want %s", cmd, err, want)
		}
	}
	go server.Write([]byte("$1\r\na\r\n+PONG\r\n"))
	for _, want := range []string{"$1 a", "+PONG"} {
		if v, err := c.ReadReply(); err != nil || v.String() != want {
			t.Fatalf("reply = %v, %v; want %s", v, err, want)
		}
	}
}

// TestValueViews: Error, Ints and Fields read the replies the tools ask
// about.
func TestValueViews(t *testing.T) {
	read := func(wire string) Value {
		v, err := Read(bufio.NewReader(strings.NewReader(wire)), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := read("-ERR x\r\n").Error(); got != "ERR x" {
		t.Errorf("Error of a simple error = %q", got)
	}
	if got := read("!5\r\nERR y\r\n").Error(); got != "ERR y" {
		t.Errorf("Error of a bulk error = %q", got)
	}
	if got := read("+OK\r\n").Error(); got != "" {
		t.Errorf("Error of +OK = %q", got)
	}
	if ints, ok := read("*2\r\n:1\r\n:-4\r\n").Ints(); !ok || !reflect.DeepEqual(ints, []int64{1, -4}) {
		t.Errorf("Ints = %v, %v", ints, ok)
	}
	for _, wire := range []string{"*2\r\n:1\r\n$1\r\nx\r\n", ":1\r\n", "*-1\r\n"} {
		if _, ok := read(wire).Ints(); ok {
			t.Errorf("Ints of %q is ok", wire)
		}
	}
	f := read("*4\r\n$4\r\nrole\r\n$6\r\nleader\r\n$4\r\nterm\r\n:3\r\n").Fields()
	if !reflect.DeepEqual(f, map[string]string{"role": "leader", "term": "3"}) {
		t.Errorf("Fields = %v", f)
	}
}
