package resp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// inlineCases are inline lines and how redis-server 7.0.15 splits them,
// recorded by sending "RPUSH L<line>\r\n" and reading the list back
// (TestInlineLikeRedis plays them against a redis-server on PATH again).
// want nil: Redis replies "Protocol error: unbalanced quotes in request"
// and closes.
var inlineCases = []struct {
	line string
	want []string
}{
	{" a b c", []string{"a", "b", "c"}},
	{"\ta\tb", []string{"a", "b"}},
	{" a\tb", []string{"a", "b"}},
	{" a\vb", []string{"a\vb"}},            // \v and \f separate only between arguments
	{" \va \fb", []string{"a", "b"}},       //
	{" a\f", []string{"a\f"}},              //
	{" a\rb", []string{"a", "b"}},          // a \r inside the line separates
	{" a\r", []string{"a"}},                // the line end's \r is dropped, another is a blank
	{" a\r\r", []string{"a"}},              //
	{" \"a\"\r", []string{"a"}},            //
	{" \"a\"\rb", []string{"a", "b"}},      //
	{" a\"b c\" d", []string{"ab c", "d"}}, // a quote opens inside a word
	{" a\"b c\"d", nil},                    // a closing quote must be followed by a blank
	{" 'x'y", nil},                         //
	{" 'x'\ty", []string{"x", "y"}},        //
	{" 'x'\vy", []string{"x", "y"}},        //
	{" \"a\"\fb", []string{"a", "b"}},      //
	{" \"a\"\"b\"", nil},                   //
	{" 'a''b'", nil},                       //
	{" \"a\" \"b\"", []string{"a", "b"}},   //
	{" \"a\\nb\"", []string{"a\nb"}},       // escapes in double quotes
	{" \"\\t\\b\\a\\r\"", []string{"\t\b\a\r"}},
	{" \"\\x41\\x4a\\x4\"", []string{"AJx4"}}, // \xHH takes two hex digits
	{" \"\\xZZ\"", []string{"xZZ"}},
	{" \"\\x\"", []string{"x"}},
	{" \"\\x4\"", []string{"x4"}},
	{" \"a\\x4G\"", []string{"ax4G"}},
	{" \"\\x00\\xff\"", []string{"\x00\xff"}},
	{" \"\\q\"", []string{"q"}},
	{" \"\\\\\"", []string{"\\"}},
	{" \"a\\\"\"", []string{"a\""}},
	{" \"a\\\"", nil}, // the escaped quote does not close
	{" \"a\\", nil},
	{" \"a", nil},
	{" a\"", nil},
	{" a\\nb", []string{"a\\nb"}},     // no escapes outside quotes
	{" 'a\\'b'", []string{"a'b"}},     // in single quotes only \' is one
	{" 'a\\\\b'", []string{"a\\\\b"}}, //
	{" 'a\\\\'", nil},                 //
	{" '\\''", []string{"'"}},         //
	{" \"\"", []string{""}},           // empty arguments
	{" ''", []string{""}},             //
	{" \xff\x80", []string{"\xff\x80"}},
	{" it's", nil},
}

// TestInlineLikeRedis splits each recorded line as Redis did, and, when
// redis-server is on PATH, checks the recording against it.
func TestInlineLikeRedis(t *testing.T) {
	for _, tc := range inlineCases {
		p := newReqParser(&scriptConn{chunks: [][]byte{[]byte("RPUSH L" + tc.line + "\r\n")}}, DefaultLimits())
		cmds, err := p.next(false)
		var pe *ProtocolError
		switch {
		case tc.want == nil:
			if !errors.As(err, &pe) || pe.what != protoUnbalancedQuotes {
				t.Errorf("%q: %d commands, %v; want unbalanced quotes", tc.line, len(cmds), err)
			}
		case err != nil || len(cmds) != 1:
			t.Errorf("%q: %d commands, %v", tc.line, len(cmds), err)
		default:
			if got, want := fmt.Sprintf("%q", cmds[0].Args[2:]), quoted(tc.want)[0]; got != want {
				t.Errorf("%q: arguments %s, want %s", tc.line, got, want)
			}
		}
	}

	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not on PATH: the recording is not checked")
	}
	sock := filepath.Join(t.TempDir(), "r.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", filepath.Dir(sock))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	dial := func() (*respwire.Conn, error) {
		nc, err := net.DialTimeout("unix", sock, time.Second)
		if err != nil {
			return nil, err
		}
		return respwire.NewConn(nc), nil
	}
	testkit.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		c, err := dial()
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Do(time.Second, "PING")
		return err
	})
	for _, tc := range inlineCases {
		c, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Do(5*time.Second, "DEL", "L"); err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("RPUSH L" + tc.line + "\r\n"))
		v, err := c.ReadReply()
		switch {
		case err != nil:
			t.Errorf("%q: %v", tc.line, err)
		case tc.want == nil:
			if v.Kind != respwire.SimpleError || v.Str != "ERR Protocol error: unbalanced quotes in request" {
				t.Errorf("%q: redis-server replied %s, want unbalanced quotes", tc.line, v.Text(respwire.WithLengths))
			} else if _, err := c.Reader.ReadByte(); err != io.EOF {
				t.Errorf("%q: redis-server did not close (%v)", tc.line, err)
			}
		case v.Kind == respwire.SimpleError:
			t.Errorf("%q: redis-server replied %s", tc.line, v.Str)
		default:
			l, err := c.Do(5*time.Second, "LRANGE", "L", "0", "-1")
			var got []string
			for _, e := range l.Elems {
				got = append(got, e.Str)
			}
			if err != nil || strings.Join(got, "\x00|") != strings.Join(tc.want, "\x00|") || len(got) != len(tc.want) {
				t.Errorf("%q: redis-server split %q (%v), the recording says %q", tc.line, got, err, tc.want)
			}
		}
		_ = c.Close()
	}
}

// TestInlineNULHidesLineEnd: as in Redis (measured: 65536 bytes wait,
// 65537 get the error), a NUL byte in an inline line hides every line end
// after it, so the bytes from the line's start count against MaxInline.
func TestInlineNULHidesLineEnd(t *testing.T) {
	for _, n := range []int{65536, 65537} {
		in := "PING\x00\r\n" + strings.Repeat("PING\r\n", (n-7)/6) + strings.Repeat("x", (n-7)%6)
		got := parseAll(t, newReqParser(&scriptConn{chunks: splitEvery([]byte(in), 4096)}, DefaultLimits()), false)
		var pe *ProtocolError
		switch {
		case len(in) != n || len(got.calls) != 0:
			t.Fatalf("%d bytes: %d calls", len(in), len(got.calls))
		case n == 65536 && got.err != io.EOF:
			t.Errorf("%d bytes: %v, want to wait for more", n, got.err)
		case n == 65537 && (!errors.As(got.err, &pe) || pe.what != protoTooBigInline):
			t.Errorf("%d bytes: %v, want too big inline request", n, got.err)
		}
	}
}
