package resp

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// TestMsgs fails for a reply of the RESP server's own without a text or
// without saying when it is sent, and checks Text fills placeholders in
// order and returns a fixed text as it is.
func TestMsgs(t *testing.T) {
	seen := map[string]msg{}
	for m := range numMsgs {
		row := msgs[m]
		if row.text == "" || row.when == "" {
			t.Errorf("msg %d has no complete row: %+v", m, row)
		}
		if prev, ok := seen[row.text]; ok {
			t.Errorf("msgs %d and %d have one text %q: one entry per condition", prev, m, row.text)
		}
		seen[row.text] = m
		if strings.ContainsAny(row.text, "\r\n") {
			t.Errorf("msg %d: a reply text must be one line: %q", m, row.text)
		}
	}
	if got := msgArity.Text("get"); got != "ERR wrong number of arguments for 'get' command" {
		t.Errorf("Text filled %q", got)
	}
	if got := msgCostOption.Text("x", "rl.token"); got != "ERR unknown option 'x' for 'rl.token': expected COST n" {
		t.Errorf("Text filled %q", got)
	}
	if got := msgSyntax.Text(); got != "ERR syntax error" {
		t.Errorf("a fixed text reads %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = msgSyntax.Text() }); n != 0 {
		t.Errorf("a fixed text allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = codeText(errcode.New(errcode.WrongType)) }); n != 0 {
		t.Errorf("a fixed code text allocates %v times", n)
	}
}

// errorPrefixes are the first words of Redis error replies: a string
// literal starting with one (or with "-" and one) is an error text.
var errorPrefixes = []string{"ERR", "WRONGTYPE", "WRONGPASS", "NOAUTH", "NOPROTO", "EXECABORT",
	"CROSSSLOT", "MOVED", "ASK", "CLUSTERDOWN", "UNCERTAIN", "LOADING", "OOM", "BUSY", "NOSCRIPT", "MISCONF", "TRYAGAIN", "READONLY"}

// TestNoInlineErrorTexts fails for an error reply text written as a
// literal in this package outside errors.go: every text is an entry of a
// catalogue, so one condition has one text and the docs list them all.
func TestNoInlineErrorTexts(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "errors.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			s = strings.TrimPrefix(s, "-")
			for _, p := range errorPrefixes {
				if s == p || strings.HasPrefix(s, p+" ") {
					t.Errorf("%s: error text %q inline: make it a catalogue entry (resp/errors.go)", fset.Position(lit.Pos()), lit.Value)
				}
			}
			return true
		})
	}
}

// designErrors is docs/design.md's region the catalogues render.
const (
	designErrorsBegin = "<!-- error tables: rendered from the catalogues by `go test ./resp -run TestDesignErrorTable -rewrite` -->\n"
	designErrorsEnd   = "<!-- end of error tables -->\n"
)

// renderErrorTables renders docs/design.md's two error tables: the codes
// (internal/errcode's catalogue) and the RESP server's own replies (msgs).
func renderErrorTables() string {
	docText := func(format string) string {
		return "`" + strings.NewReplacer("{", "<", "}", ">").Replace(format) + "`"
	}
	names := codeNames()
	var b strings.Builder
	b.WriteString("| Code | Reply text | Produced by | Class | Applied? Retry? |\n|---|---|---|---|---|\n")
	for c := range errcode.NumCodes {
		row := c.Entry()
		reply := docText(row.Reply)
		if row.Bare != "" {
			reply += " (without details: " + docText(row.Bare) + ")"
		}
		class := "not applied"
		if row.Class == errcode.MayHaveApplied {
			class = "may have applied"
		}
		name := c.String()
		if int(c) < len(names) {
			name = names[c]
		}
		b.WriteString("| `" + name + "` | " + reply + " | " + row.Producer + " | " + class + " | " + row.Assume + " |\n")
	}
	b.WriteString("\nThe RESP server's own replies (`msgs` in resp/errors.go): none of them was applied.\n\n")
	b.WriteString("| Reply text | Sent when |\n|---|---|\n")
	for m := range numMsgs {
		b.WriteString("| " + docText(msgs[m].text) + " | " + msgs[m].when + " |\n")
	}
	return b.String()
}

// codeNames returns the codes' Go names from internal/errcode's const
// block, for the docs (the catalogue's Name is the text logs show).
func codeNames() []string {
	f, err := parser.ParseFile(token.NewFileSet(), "../internal/errcode/errcode.go", nil, 0)
	if err != nil {
		return nil
	}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST || len(gd.Specs) == 0 || gd.Specs[0].(*ast.ValueSpec).Names[0].Name != "Internal" {
			continue
		}
		var names []string
		for _, spec := range gd.Specs {
			for _, id := range spec.(*ast.ValueSpec).Names {
				names = append(names, id.Name)
			}
		}
		return names
	}
	return nil
}

// TestDesignErrorTable fails when docs/design.md's error tables are not
// the ones the catalogues render; -rewrite writes them.
func TestDesignErrorTable(t *testing.T) {
	const path = "../docs/design.md"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i := strings.Index(doc, designErrorsBegin)
	j := strings.Index(doc, designErrorsEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no region %q ... %q", path, designErrorsBegin, designErrorsEnd)
	}
	want := renderErrorTables()
	if got := doc[i+len(designErrorsBegin) : j]; got != want {
		if *rewrite {
			doc = doc[:i+len(designErrorsBegin)] + want + doc[j:]
			if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s's error tables differ from the catalogues; run go test ./resp -run TestDesignErrorTable -rewrite", path)
	}
}
