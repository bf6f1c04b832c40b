package resp

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/rls"
)

// Transcript tests, in the style of pebble's datadriven files: each file
// under testdata/transcripts is a session on one connection to a fresh
// server (DEBUG enabled, so a transcript freezes the clock first), each
// case a command, then "----", then its exact reply as respwire renders it
// (Text with lengths; CR and LF inside a string written \r and \n). Lines
// starting with "# " before a case are comments; lines starting with "> "
// after the command are its note in README.md (in a transcript README.md
// does not render as a block, "> shown" asks that README.md or docs/ show
// the reply in backquotes). A blank line ends a case.
//
// A line starting with "!" is a directive to the runner, not a command:
//
//	!server [debug=off] [max-log-limit=N] [requirepass=P] [rls=DIR] [cluster=R] [redirect=on]
//	    the cases after it run on a new connection to a new server with
//	    these settings (by default DEBUG on, the rest Config's defaults);
//	    rls=DIR serves the rate limit service over the rules in DIR
//	    (relative to resp/);
//	    cluster=R makes it node n2 of the fake three-node cluster
//	    threeNodes speaking the cluster protocol, R its role: follower
//	    (n1 at 127.0.0.1:7001 leads every slot), leader (n2 leads) or
//	    no-leader (no leader known), raft-only: the same Raft node
//	    without the cluster protocol (Cluster off, n2 leading), or
//	    three-groups: n2 of threeGroups, three Raft groups over the slots
//	    (foo's in group 2, bar's and hello's in group 0), run here
//	!clients
//	    TestTranscriptClients also plays the file with go-redis (RESP2 and
//	    RESP3) and redis-cli, each on servers of its own, and checks that
//	    each shows the reply the raw connection read (for files whose
//	    replies are integers, strings, errors, nulls and arrays of them)
//
// A word of a command in double quotes is a Go string literal; "s"*N is
// that string N times (a long key or token).
//
//	go test ./resp -run TestTranscripts -rewrite
//
// regenerates every expected reply and the README blocks the transcripts
// render (readmeBlocks), which TestReadmeTranscripts otherwise checks.

var rewrite = flag.Bool("rewrite", false, "rewrite the transcripts' expected replies and README.md's blocks rendered from them")

// transcriptCase is one command of a transcript.
type transcriptCase struct {
	comments []string // "# " lines before the command, kept by -rewrite
	command  string   // as written: arguments split on spaces, "..." quoted
	notes    []string // README notes
	want     string   // the expected reply's text
	got      respwire.Value
}

// parseTranscript reads a transcript file.
func parseTranscript(t *testing.T, path string) []*transcriptCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cases []*transcriptCase
	var cur *transcriptCase
	var comments []string
	inReply := false
	for n, line := range strings.Split(string(data), "\n") {
		switch {
		case inReply:
			cur.want = line
			inReply = false
			if line == "" { // no reply written yet: -rewrite records it
				cur = nil
			}
		case line == "":
			cur = nil
		case strings.HasPrefix(line, "#"):
			comments = append(comments, line)
		case cur == nil && strings.HasPrefix(line, "!"):
			cases = append(cases, &transcriptCase{comments: comments, command: line})
			comments = nil
		case cur == nil:
			cur = &transcriptCase{comments: comments, command: line}
			comments = nil
			cases = append(cases, cur)
		case strings.HasPrefix(line, "> "):
			cur.notes = append(cur.notes, line[2:])
		case line == "----":
			inReply = true
		default:
			t.Fatalf("%s:%d: unexpected line %q", path, n+1, line)
		}
	}
	return cases
}

// splitCommand splits a transcript command into arguments: words separated
// by spaces, a word in double quotes taken as a Go string literal (spaces
// inside it included), "s"*N as that string N times.
func splitCommand(t testing.TB, cmd string) []string {
	t.Helper()
	var args []string
	for _, w := range commandWords(cmd) {
		if strings.HasPrefix(w, `"`) {
			lit, times := w, 1
			if i := strings.LastIndex(w, `"*`); i > 0 {
				n, err := strconv.Atoi(w[i+2:])
				if err != nil || n < 0 || n > 1<<20 {
					t.Fatalf("command %q: bad repeat count in %s", cmd, w)
				}
				lit, times = w[:i+1], n
			}
			u, err := strconv.Unquote(lit)
			if err != nil {
				t.Fatalf("command %q: bad quoted word %s: %v", cmd, w, err)
			}
			w = strings.Repeat(u, times)
		}
		args = append(args, w)
	}
	return args
}

// commandWords splits cmd at spaces outside double-quoted words.
func commandWords(cmd string) []string {
	var words []string
	for i := 0; i < len(cmd); {
		if cmd[i] == ' ' || cmd[i] == '\t' {
			i++
			continue
		}
		j := i
		if cmd[i] == '"' {
			for j++; j < len(cmd) && cmd[j] != '"'; j++ {
				if cmd[j] == '\\' {
					j++
				}
			}
		}
		for j < len(cmd) && cmd[j] != ' ' && cmd[j] != '\t' {
			j++
		}
		words = append(words, cmd[i:j])
		i = j
	}
	return words
}

// replyText renders a reply for a transcript: one line, exact types.
func replyText(v respwire.Value) string {
	s := v.Text(respwire.WithLengths)
	return strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(s)
}

// isDirective reports whether a case is a directive to the runner.
func (c *transcriptCase) isDirective() bool { return strings.HasPrefix(c.command, "!") }

// transcriptServer is the server a "!server" directive asks for.
type transcriptServer struct {
	cfg     Config
	rlsDir  string // the rate limit service's rules, "" for none
	cluster string // "", or the role of a fake cluster node
}

// start starts the server and returns its address.
func (ts transcriptServer) start(t testing.TB) string {
	t.Helper()
	cfg := ts.cfg
	if ts.rlsDir != "" {
		svc, err := rls.New(rls.Config{Dir: ts.rlsDir, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		cfg.RLS = svc
	}
	switch ts.cluster {
	case "":
		return startServer(t, cfg)
	case "three-groups":
		cfg.Cluster = true
		_, addr := startThreeGroups(t, cfg)
		return addr
	}
	// Route's answer for each role: the leader's address, whether n2 leads.
	role := map[string]struct {
		leader string
		local  bool
	}{
		"follower":  {"127.0.0.1:7001", false},
		"leader":    {"", true},
		"no-leader": {"", false},
		"raft-only": {"", true},
	}[ts.cluster]
	cfg.Cluster = ts.cluster != "raft-only"
	_, _, addr := startCluster(t, cfg, threeNodes, role.leader, role.local)
	return addr
}

// serverDirective reads a "!server" directive's settings; ok is false for
// another directive.
func serverDirective(t testing.TB, line string) (ts transcriptServer, ok bool) {
	t.Helper()
	words := strings.Fields(line)
	switch words[0] {
	case "!server":
	case "!clients":
		return ts, false
	default:
		t.Fatalf("unknown directive %q", line)
	}
	ts.cfg.EnableDebug = true
	for _, w := range words[1:] {
		name, val, _ := strings.Cut(w, "=")
		switch name {
		case "debug", "redirect":
			if val != "on" && val != "off" {
				t.Fatalf("directive %q: %s is on or off", line, name)
			}
			if name == "debug" {
				ts.cfg.EnableDebug = val == "on"
			} else {
				ts.cfg.Redirect = val == "on"
			}
		case "max-log-limit":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < 1 {
				t.Fatalf("directive %q: bad max-log-limit", line)
			}
			ts.cfg.MaxLogLimit = n
		case "requirepass":
			ts.cfg.RequirePass = val
		case "rls":
			ts.rlsDir = val
		case "cluster":
			switch val {
			case "follower", "leader", "no-leader", "raft-only", "three-groups":
			default:
				t.Fatalf("directive %q: cluster is follower, leader, no-leader, raft-only or three-groups", line)
			}
			ts.cluster = val
		default:
			t.Fatalf("directive %q: unknown setting %q", line, name)
		}
	}
	return ts, true
}

// hasDirective reports whether a transcript holds the directive name.
func hasDirective(cases []*transcriptCase, name string) bool {
	for _, c := range cases {
		if c.isDirective() && strings.Fields(c.command)[0] == name {
			return true
		}
	}
	return false
}

// playTranscript plays a transcript: for each server it asks for (one with
// the default settings before the first case, unless a "!server" directive
// comes first) it calls dial with the server's address, sends the cases'
// commands with the function dial returned, and calls check with each case
// and its reply (the value read raw, or the text a client library shows).
func playTranscript(t testing.TB, cases []*transcriptCase, dial func(addr string) func(args []string) (respwire.Value, string), check func(c *transcriptCase, raw respwire.Value, shown string)) {
	t.Helper()
	var do func(args []string) (respwire.Value, string)
	for _, c := range cases {
		if c.isDirective() {
			if ts, ok := serverDirective(t, c.command); ok {
				do = dial(ts.start(t))
			}
			continue
		}
		if do == nil {
			do = dial(startServer(t, Config{EnableDebug: true}))
		}
		v, shown := do(splitCommand(t, c.command))
		check(c, v, shown)
	}
}

// runTranscript runs a transcript's commands on one connection per server
// and records the replies.
func runTranscript(t testing.TB, cases []*transcriptCase) {
	t.Helper()
	playTranscript(t, cases, func(addr string) func([]string) (respwire.Value, string) {
		conn, err := respwire.Dial(addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return func(args []string) (respwire.Value, string) {
			v, err := conn.Do(5*time.Second, args...)
			if err != nil {
				t.Fatalf("%.60q: %v", args, err)
			}
			return v, ""
		}
	}, func(c *transcriptCase, v respwire.Value, _ string) { c.got = v })
}

// writeTranscript renders a transcript file with the replies recorded.
func writeTranscript(cases []*transcriptCase) string {
	var b strings.Builder
	for i, c := range cases {
		if i > 0 {
			b.WriteByte('\n')
		}
		for _, l := range c.comments {
			b.WriteString(l + "\n")
		}
		b.WriteString(c.command + "\n")
		if c.isDirective() {
			continue
		}
		for _, n := range c.notes {
			b.WriteString("> " + n + "\n")
		}
		b.WriteString("----\n" + replyText(c.got) + "\n")
	}
	return b.String()
}

func transcriptFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "transcripts", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts under testdata/transcripts (%v)", err)
	}
	return files
}

// TestTranscripts runs every transcript against a real server and checks
// each reply byte for byte (or, with -rewrite, records them).
func TestTranscripts(t *testing.T) {
	for _, path := range transcriptFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			cases := parseTranscript(t, path)
			runTranscript(t, cases)
			if *rewrite {
				if err := os.WriteFile(path, []byte(writeTranscript(cases)), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			for _, c := range cases {
				if c.isDirective() {
					continue
				}
				if got := replyText(c.got); got != c.want {
					t.Errorf("%s\n  got:  %s\n  want: %s", c.command, got, c.want)
				}
			}
		})
	}
	if *rewrite {
		syncReadme(t, true)
	}
}

// readmeBlocks maps a transcript to the README.md heading whose first code
// block it renders, with the layout of that block.
var readmeBlocks = map[string]readmeLayout{
	"readme_session.txt": {heading: "### A session, reply by reply", arrowCol: 34, noteCol: 53},
	"readme_errors.txt":  {heading: "### Errors", arrowCol: 26, noteCol: 53},
}

// readmeLayout places a transcript's lines in a README block: the command,
// "-> " at arrowCol (on the next line when the command is longer), the
// reply, and the notes from noteCol (each on its own line when the reply
// reaches past it).
type readmeLayout struct {
	heading           string
	arrowCol, noteCol int
}

// readmeReply flattens a reply to what redis-cli shows, on one line: the
// elements of an array separated by a space (two around a nested array),
// a map's pairs by a comma, (nil) for a null, (empty) for an empty array, a string's lines joined.
func readmeReply(v respwire.Value) string {
	switch {
	case v.IsNull():
		return "(nil)"
	case v.IsAggregate():
		if len(v.Elems) == 0 {
			return "(empty)"
		}
		var b strings.Builder
		for i, e := range v.Elems {
			if v.Kind == respwire.Map && i > 0 && i%2 == 0 {
				b.WriteString(", ")
				b.WriteString(readmeReply(e))
				continue
			}
			if i > 0 {
				b.WriteByte(' ')
				if v.Kind != respwire.Map && (e.IsAggregate() || v.Elems[i-1].IsAggregate()) {
					b.WriteByte(' ')
				}
			}
			b.WriteString(readmeReply(e))
		}
		return b.String()
	case v.Kind == respwire.Integer:
		return strconv.FormatInt(v.Int, 10)
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(v.Str, "\r\n", " ")), " ")
}

// renderReadme renders a transcript's README block (without the fences).
func renderReadme(l readmeLayout, cases []*transcriptCase) string {
	var b strings.Builder
	pad := func(s string, col int) string {
		if len(s) < col {
			return s + strings.Repeat(" ", col-len(s))
		}
		return s
	}
	for _, c := range cases {
		if c.isDirective() {
			continue
		}
		line := c.command
		if len(line) >= l.arrowCol {
			b.WriteString(line + "\n")
			line = ""
		}
		line = pad(line, l.arrowCol) + "-> " + readmeReply(c.got)
		for _, n := range c.notes {
			if len(line) >= l.noteCol-1 {
				b.WriteString(line + "\n")
				line = ""
			}
			line = pad(line, l.noteCol) + n
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	return b.String()
}

// readmeBlock finds the first fenced block after heading in readme and
// returns the offsets of its content.
func readmeBlock(readme, heading string) (start, end int, err error) {
	h := strings.Index(readme, "\n"+heading+"\n")
	if h < 0 {
		return 0, 0, fmt.Errorf("README.md has no heading %q", heading)
	}
	open := strings.Index(readme[h:], "\n```\n")
	if open < 0 {
		return 0, 0, fmt.Errorf("README.md has no code block after %q", heading)
	}
	start = h + open + len("\n```\n")
	closing := strings.Index(readme[start:], "```\n")
	if closing < 0 {
		return 0, 0, fmt.Errorf("README.md's block after %q is not closed", heading)
	}
	return start, start + closing, nil
}

// renderedBlocks runs the transcripts README.md shows and renders their
// blocks, by heading.
func renderedBlocks(t *testing.T) map[string]string {
	t.Helper()
	out := make(map[string]string)
	for file, l := range readmeBlocks {
		cases := parseTranscript(t, filepath.Join("testdata", "transcripts", file))
		runTranscript(t, cases)
		out[l.heading] = renderReadme(l, cases)
	}
	return out
}

const readmePath = "../README.md"

// syncReadme renders the transcripts' blocks and either writes them into
// README.md (write) or reports where README.md differs from them.
func syncReadme(t *testing.T, write bool) {
	t.Helper()
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	for heading, want := range renderedBlocks(t) {
		start, end, err := readmeBlock(readme, heading)
		if err != nil {
			t.Fatal(err)
		}
		if got := readme[start:end]; got != want && !write {
			t.Errorf("README.md's block under %q differs from its transcript (run go test ./resp -run TestTranscripts -rewrite):\n%s",
				heading, testkit.LineDiff("README", got, "transcript", want, 0))
		}
		readme = readme[:start] + want + readme[end:]
	}
	if write {
		if err := os.WriteFile(readmePath, []byte(readme), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadmeTranscripts checks that README.md's worked examples are what
// the transcripts render from a real server's replies: the README cannot
// drift from the server (go test ./resp -run TestTranscripts -rewrite
// brings it back in step).
func TestReadmeTranscripts(t *testing.T) {
	if *rewrite {
		t.Skip("TestTranscripts rewrites README.md")
	}
	syncReadme(t, false)
	checkShown(t)
}

// checkShown checks the replies of the cases noted "> shown" in the
// transcripts README.md does not render as a block (its tables' examples):
// each must appear, in backquotes, in README.md or a page under docs/.
func checkShown(t *testing.T) {
	t.Helper()
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, p := range append([]string{readmePath}, pages...) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		text.Write(data)
	}
	for _, path := range transcriptFiles(t) {
		if _, ok := readmeBlocks[filepath.Base(path)]; ok {
			continue
		}
		cases := parseTranscript(t, path)
		runTranscript(t, cases)
		for _, c := range cases {
			if !slices.Contains(c.notes, "shown") {
				continue
			}
			if shown := "`" + readmeReply(c.got) + "`"; !strings.Contains(text.String(), shown) {
				t.Errorf("%s: README.md shows no %s, the reply of %s", filepath.Base(path), shown, c.command)
			}
		}
	}
}

// TestTranscriptRunner checks the runner's own features: "s"*N repeats a
// quoted word, a "!server" directive starts a new server with its settings
// (nothing of the first server's keys, the directive's DEBUG and
// max-log-limit), and -rewrite writes a transcript back as it was read.
func TestTranscriptRunner(t *testing.T) {
	got := splitCommand(t, `RL.RELEASE "x"*3 "\x01"*2 ""*5 "a*2" plain`)
	if want := []string{"RL.RELEASE", "xxx", "\x01\x01", "", "a*2", "plain"}; !slices.Equal(got, want) {
		t.Fatalf("splitCommand: %q, want %q", got, want)
	}
	const text = `# The default server: DEBUG on.
SET k 1
----
+OK

DEBUG TIMEWARP 1
----
+OK

RL.LOG k2 6 1m
----
*5 [:1 :6 :5 :0 :60000]

# A new server, DEBUG off, RL.LOG's limit at most 5.
!server debug=off max-log-limit=5

EXISTS k
----
:0

RL.LOG k2 6 1m
----
-ERR invalid limit '6': exceeds max-log-limit 5

DEBUG TIMEWARP 1
----
-ERR DEBUG command not allowed. Start sluice with --enable-debug-command to use it.
`
	path := filepath.Join(t.TempDir(), "runner.txt")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := parseTranscript(t, path)
	if len(cases) != 7 || !cases[3].isDirective() {
		t.Fatalf("parsed %d cases, the 4th a directive: %v", len(cases), cases[3].isDirective())
	}
	runTranscript(t, cases)
	for _, c := range cases {
		if !c.isDirective() && replyText(c.got) != c.want {
			t.Errorf("%s: reply %s, want %s", c.command, replyText(c.got), c.want)
		}
	}
	if got := writeTranscript(cases); got != text {
		t.Errorf("writeTranscript:\n%s\nwant:\n%s", got, text)
	}
}
