package resp

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestCommandsDocumented fails for a command-table entry (a command or a
// subcommand, on any kind of node) that docs/commands.md never names: each
// must appear in backquotes, as a client writes it (`RL.TOKEN ...`,
// `CLIENT SETNAME ...`).
func TestCommandsDocumented(t *testing.T) {
	data, err := os.ReadFile("../docs/commands.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	names := map[string]bool{}
	for _, raft := range []bool{false, true} {
		for _, redisCluster := range []bool{false, true} {
			for _, cmd := range buildCommandTable(raft, redisCluster) {
				names[cmd.name] = true
				for _, sub := range cmd.subs {
					names[sub.name] = true
				}
			}
		}
	}
	var missing []string
	for name := range names {
		written := strings.ToUpper(strings.ReplaceAll(name, "|", " "))
		// In backquotes, at the start of a code span, followed by its end,
		// an argument or a separator.
		re := regexp.MustCompile("`" + regexp.QuoteMeta(written) + "[` |,]")
		if !re.MatchString(doc) {
			missing = append(missing, written)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("docs/commands.md does not name %d commands of the table: %s", len(missing), strings.Join(missing, ", "))
	}
}

// TestPackagesDocumented fails for a package of the module (a directory
// holding Go files) that docs/design.md's package table does not name,
// itself or a parent directory, as `dir/`.
func TestPackagesDocumented(t *testing.T) {
	data, err := os.ReadFile("../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	// The table's first column: its rows start with "| `".
	var table strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if first, _, ok := strings.Cut(strings.TrimPrefix(line, "| "), " | "); ok && strings.HasPrefix(line, "| `") {
			table.WriteString(first + "\n")
		}
	}
	doc := table.String()
	dirs := map[string]bool{}
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			dirs[filepath.ToSlash(filepath.Dir(path))[len("../"):]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir := range dirs {
		named := false
		for d := dir; d != "." && !named; d = filepath.Dir(d) {
			named = strings.Contains(doc, "`"+d+"/`")
		}
		if !named {
			t.Errorf("docs/design.md's package table does not name %s/", dir)
		}
	}
}
