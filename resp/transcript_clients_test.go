package resp

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-rl/sluice/internal/respwire"
)

// transcriptClient is a client library a transcript marked "!clients" is
// also played with.
type transcriptClient struct {
	name string
	// dial returns a function that sends one command to addr and returns
	// the reply as this client shows it.
	dial func(t *testing.T, addr string) func(args []string) string
	// show renders a reply read by the raw connection as this client
	// shows it.
	show func(v respwire.Value) string
}

// transcriptClients are go-redis speaking RESP2 and RESP3, and the real
// redis-cli when it is installed.
func transcriptClients(t *testing.T) []transcriptClient {
	var cs []transcriptClient
	for _, proto := range []int{2, 3} {
		cs = append(cs, transcriptClient{name: fmt.Sprintf("go-redis-resp%d", proto), show: goRedisText, dial: func(t *testing.T, addr string) func([]string) string {
			c := newClient(t, addr, proto)
			return func(args []string) string {
				a := make([]any, len(args))
				for i, s := range args {
					a[i] = s
				}
				v, err := c.Do(context.Background(), a...).Result()
				return flattenGoRedis(v, err)
			}
		}})
	}
	if cli, err := exec.LookPath("redis-cli"); err == nil {
		cs = append(cs, transcriptClient{name: "redis-cli", show: cliText, dial: func(t *testing.T, addr string) func([]string) string {
			host, port, _ := strings.Cut(addr, ":")
			return func(args []string) string {
				out, err := exec.Command(cli, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
				var exit *exec.ExitError
				if err != nil && !(errors.As(err, &exit) && len(out) > 0) { // an error reply may exit 1
					t.Fatalf("redis-cli %.60q: %v\n%s", args, err, out)
				}
				return strings.TrimRight(string(out), "\n") // an error reply ends with an empty line
			}
		}})
	} else {
		t.Log("redis-cli is not installed (.ci/run installs redis-tools): transcripts without it")
	}
	return cs
}

// flattenGoRedis renders a go-redis result as goRedisText renders the same
// reply read raw.
func flattenGoRedis(v any, err error) string {
	switch {
	case errors.Is(err, redis.Nil):
		return "$-1"
	case err != nil:
		return "-" + err.Error()
	}
	switch v := v.(type) {
	case int64:
		return fmt.Sprintf(":%d", v)
	case string:
		return "+" + v
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = flattenGoRedis(e, nil)
		}
		return fmt.Sprintf("*%d [%s]", len(v), strings.Join(parts, " "))
	}
	return fmt.Sprintf("?%T %v", v, v)
}

// goRedisText renders a reply as go-redis returns it, flattened like
// respwire's Text: go-redis does not tell a status from a bulk string
// (both "+text"), nor RESP2's nulls from RESP3's ("$-1").
func goRedisText(v respwire.Value) string {
	switch {
	case v.IsNull():
		return "$-1"
	case v.Kind == respwire.SimpleError || v.Kind == respwire.BulkError:
		return "-" + v.Str
	case v.Kind == respwire.Integer:
		return fmt.Sprintf(":%d", v.Int)
	case v.Kind == respwire.Map:
		return "(a map: not played with go-redis) " + v.Text(respwire.WithLengths)
	case v.IsAggregate():
		parts := make([]string, len(v.Elems))
		for i, e := range v.Elems {
			parts[i] = goRedisText(e)
		}
		return fmt.Sprintf("*%d [%s]", len(v.Elems), strings.Join(parts, " "))
	}
	return "+" + v.Str
}

// cliText renders a reply as redis-cli prints it off a terminal: one line
// per array element (a nested array's elements on lines of their own, like
// the outer ones), integers and strings bare, a null as an empty line, an
// error as its text.
func cliText(v respwire.Value) string {
	switch {
	case v.IsNull():
		return ""
	case v.Kind == respwire.Integer:
		return fmt.Sprint(v.Int)
	case v.IsAggregate():
		lines := make([]string, len(v.Elems))
		for i, e := range v.Elems {
			lines[i] = cliText(e)
		}
		return strings.Join(lines, "\n")
	}
	return v.Str
}

// TestTranscriptClients plays the transcripts marked "!clients" with
// go-redis and redis-cli: each client must show every reply as the raw
// connection read it (which TestTranscripts checks byte for byte).
func TestTranscriptClients(t *testing.T) {
	played := 0
	for _, path := range transcriptFiles(t) {
		cases := parseTranscript(t, path)
		if !hasDirective(cases, "!clients") {
			continue
		}
		played++
		t.Run(filepath.Base(path), func(t *testing.T) {
			runTranscript(t, cases)
			for _, cl := range transcriptClients(t) {
				t.Run(cl.name, func(t *testing.T) {
					playTranscript(t, cases, func(addr string) func([]string) (respwire.Value, string) {
						do := cl.dial(t, addr)
						return func(args []string) (respwire.Value, string) { return respwire.Value{}, do(args) }
					}, func(c *transcriptCase, _ respwire.Value, shown string) {
						if want := cl.show(c.got); shown != want {
							t.Errorf("%.80s\n  shows: %q\n  want:  %q (raw %s)", c.command, shown, want, replyText(c.got))
						}
					})
				})
			}
		})
	}
	if played == 0 {
		t.Fatal("no transcript is marked !clients")
	}
}
