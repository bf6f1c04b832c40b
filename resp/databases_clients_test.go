package resp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/pyredis"
)

// TestPythonDatabases: redis-py given redis://.../1 URLs (RESP2, and RESP3
// where redis-py has it) works in database 1, apart from database 0, with
// INCRBYFLOAT and WATCH transactions (redis-py's transaction helper, and a
// WATCH raced by another connection raising WatchError); Python's limits
// (Debian's python3-limits, which .ci/run installs) counts a fixed window
// in database 1. The replies are those redis-server 7.0.15 gives the same
// script.
func TestPythonDatabases(t *testing.T) {
	python := pyredis.Require(t)
	version, err := exec.Command(python, "-c", "import redis; print(redis.__version__)").Output()
	if err != nil {
		t.Fatalf("redis-py version: %v", err)
	}
	addr := startServer(t, Config{})
	_, port, _ := strings.Cut(addr, ":")
	out, err := exec.Command(python, "testdata/python/databases.py", port).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-py %s: %v\n%s", version, err, out)
	}
	run := func(name string) []string {
		return []string{
			name + ".db1 b'one'",
			name + ".db0 None",
			name + ".incrbyfloat 2.5",
			name + ".transaction [True]",
			name + ".after b'5.0'",
			name + ".raced WatchError",
			name + ".value b'changed'",
			name + ".dbsize 2 0",
		}
	}
	want := run("default")
	if major, _, _ := strings.Cut(strings.TrimSpace(string(version)), "."); major >= "5" && len(major) == 1 {
		want = append(want, run("resp3")...)
	}
	if exec.Command(python, "-c", "import limits").Run() == nil {
		want = append(want, "limits.hits [True, True, False]", "limits.test False", "limits.dbsize 1 0")
	} else {
		want = append(want, "limits missing")
	}
	if got := strings.TrimSpace(string(out)); got != strings.Join(want, "\n") {
		t.Fatalf("redis-py %s replied:\n%s\nwant:\n%s", strings.TrimSpace(string(version)), got, strings.Join(want, "\n"))
	}
}

// TestNodeDatabases: ioredis given a redis://.../1 URL works in database
// 1, apart from database 0, with INCRBYFLOAT and WATCH (a transaction raced
// by another connection: EXEC null), as redis-server 7.0.15 replies the
// same script. .ci/run installs ioredis with npm and sets
// SLUICE_NODE_MODULES; elsewhere the test is skipped.
func TestNodeDatabases(t *testing.T) {
	dir := os.Getenv("SLUICE_NODE_MODULES")
	node, err := exec.LookPath("node")
	if dir == "" || err != nil {
		t.Skip("SLUICE_NODE_MODULES or node not set up (.ci/run installs ioredis with npm)")
	}
	addr := startServer(t, Config{})
	_, port, _ := strings.Cut(addr, ":")
	src, err := os.ReadFile("testdata/node/databases.mjs")
	if err != nil {
		t.Fatal(err)
	}
	// Node resolves packages from the script's folder upwards: run a copy
	// placed beside node_modules.
	copyPath := filepath.Join(dir, "sluice-databases.mjs")
	if err := os.WriteFile(copyPath, src, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, copyPath, port).CombinedOutput()
	if err != nil {
		t.Fatalf("ioredis: %v\n%s", err, out)
	}
	want := strings.Join([]string{
		`ioredis.db1 "one"`,
		`ioredis.db0 null`,
		`ioredis.incrbyfloat "2.5"`,
		`ioredis.exec [[null,"2.75"]]`,
		`ioredis.raced null`,
		`ioredis.value "raced"`,
		`ioredis.dbsize [2,0]`,
	}, "\n")
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("ioredis replied:\n%s\nwant:\n%s", got, want)
	}
}

// TestClientListDB: CLIENT INFO and CLIENT LIST show the connection's
// database; RESET returns it to 0.
func TestClientListDB(t *testing.T) {
	addr := startServer(t, Config{})
	c := rawDial(t, addr)
	if got := string(c.do(t, "SELECT", "3")); got != "+OK" {
		t.Fatalf("SELECT 3: %s", got)
	}
	for _, cmd := range [][]string{{"CLIENT", "INFO"}, {"CLIENT", "LIST"}} {
		if got := string(c.do(t, cmd...)); !strings.Contains(got, " db=3 ") {
			t.Fatalf("%v after SELECT 3: %s", cmd, got)
		}
	}
	c.do(t, "RESET")
	if got := string(c.do(t, "CLIENT", "INFO")); !strings.Contains(got, " db=0 ") {
		t.Fatalf("CLIENT INFO after RESET: %s", got)
	}
}
