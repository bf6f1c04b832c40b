package resp

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
	walkGo(t, func(path string) {
		dirs[filepath.ToSlash(filepath.Dir(path))[len("../"):]] = true
	})
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

// TestFuzzTargetsInMakefile fails for a fuzz target of the module (a
// `func FuzzX` in a _test.go file) that `make fuzz` does not run in its
// package, so none is written and then never fuzzed.
func TestFuzzTargetsInMakefile(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	var missing []string
	eachTestFile(t, func(path string, src []byte) {
		pkg := "./" + filepath.ToSlash(strings.TrimPrefix(filepath.Dir(path), "../")) + "/"
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(src), -1) {
			line := "-fuzz '^" + m[1] + "$$' -fuzztime $(FUZZTIME) " + pkg
			if !strings.Contains(string(mk), line) {
				missing = append(missing, m[1]+" in "+pkg)
			}
		}
	})
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("make fuzz does not run %d fuzz targets: %s", len(missing), strings.Join(missing, ", "))
	}
}

// TestDesignNamesRealTests fails for a test, fuzz target or benchmark
// that docs/design.md names ("Where things go" says which test catches
// each forgotten step) and no _test.go file of the repository defines.
func TestDesignNamesRealTests(t *testing.T) {
	design, err := os.ReadFile("../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	funcs := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)\w+)\(`)
	eachTestFile(t, func(_ string, src []byte) {
		for _, m := range funcs.FindAllSubmatch(src, -1) {
			defined[string(m[1])] = true
		}
	})
	var missing []string
	named := regexp.MustCompile(`\b(?:Test|Fuzz|Benchmark)[A-Z]\w*`)
	for _, name := range named.FindAllString(string(design), -1) {
		if !defined[name] && !slices.Contains(missing, name) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/design.md names tests that no _test.go file defines: %s", strings.Join(missing, ", "))
	}
}

// eachTestFile calls fn with every _test.go file of the repository and
// its source.
func eachTestFile(t *testing.T, fn func(path string, src []byte)) {
	t.Helper()
	walkGo(t, func(path string) {
		if !strings.HasSuffix(path, "_test.go") {
			return
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fn(path, src)
	})
}

// walkGo calls fn with the path (from resp/) of every Go file of the
// repository, the middleware's module included; hidden, testdata and
// node_modules directories are left out.
func walkGo(t *testing.T, fn func(path string)) {
	t.Helper()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") && path != ".." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			fn(path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
