package deploy

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/internal/sluiceproc"
)

// binary is the sluice binary under test: $SLUICE_BIN (make test and make
// deploy-test set it), or one built for this run.
var binary string

// slow reports whether the slow deployment tests must run rather than skip
// when their tools are missing (make deploy-test sets SLUICE_DEPLOY_TESTS=1).
func slow() bool { return os.Getenv("SLUICE_DEPLOY_TESTS") == "1" }

// testVersion is the version the binary built here reports.
const testVersion = "v0.0.0-deploytest"

func TestMain(m *testing.M) {
	binary = os.Getenv("SLUICE_BIN")
	var dir string
	if binary == "" {
		var err error
		if dir, err = os.MkdirTemp("", "sluice-deploy"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		binary = filepath.Join(dir, "sluice")
		build := exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion+" -X main.commit=0123456789abcdef0123456789abcdef01234567", "-o", binary, "../cmd/sluice")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build sluice:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

var (
	flagsOnce sync.Once
	flagNames map[string]bool
	flagsErr  error
)

// binaryFlags returns the names of the flags the binary accepts, from its
// --help.
func binaryFlags(t *testing.T) map[string]bool {
	t.Helper()
	flagsOnce.Do(func() {
		out, _ := exec.Command(binary, "--help").CombinedOutput() // exits 0 or 2 by flag package rules
		flagNames = map[string]bool{}
		re := regexp.MustCompile(`^\s+-{1,2}([a-z0-9-]+)`)
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				flagNames[m[1]] = true
			}
		}
		if len(flagNames) < 20 {
			flagsErr = fmt.Errorf("only %d flags in sluice --help:\n%s", len(flagNames), out)
		}
	})
	if flagsErr != nil {
		t.Fatal(flagsErr)
	}
	return flagNames
}

// checkConfig runs sluice check-config with args: the binary's own parsing
// and validation, as at start-up.
func checkConfig(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(binary, append([]string{"check-config"}, args...)...).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "configuration OK" {
		t.Errorf("sluice check-config %q: %v\n%s", args, err, out)
	}
}

// freeAddrs returns n addresses of 127.0.0.1 on ports that were free a
// moment ago (sluiceproc.FreeAddr: below the ephemeral range), failing the
// test when there are none.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		a, err := sluiceproc.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = a
	}
	return addrs
}

// flagArgs returns the names of the --flags in args (a command line), and
// fails the test for each the binary does not accept.
func flagArgs(t *testing.T, where string, args []string) []string {
	t.Helper()
	known := binaryFlags(t)
	var names []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !known[name] {
			t.Errorf("%s: sluice has no flag --%s", where, name)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
