package resp

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/pyredis"
)

// TestPythonClient connects redis-py with its default settings (and with
// protocol=3 where the installed redis-py has it). .ci/run installs Debian's
// python3-redis; elsewhere, without a python3 that imports redis, the test
// is skipped.
func TestPythonClient(t *testing.T) {
	python := pyredis.Require(t)
	version, err := exec.Command(python, "-c", "import redis; print(redis.__version__)").Output()
	if err != nil {
		t.Fatalf("redis-py version: %v", err)
	}
	addr := debugServer(t, epoch2030)
	_, port, _ := strings.Cut(addr, ":")
	out, err := exec.Command(python, "testdata/python/clients.py", port).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-py %s: %v\n%s", version, err, out)
	}
	run := func(name string) []string {
		return []string{
			name + ".ping True",
			name + ".token [1, 10, 9, 0, 1000]",
			name + ".peek None",
			name + ".throttle [0, 16, 15, -1, 2]",
			name + ".error invalid capacity 'ten': must be an integer from 0 to 9007199254740992", // redis-py drops the "ERR "
		}
	}
	want := run("default")
	major, _, _ := strings.Cut(strings.TrimSpace(string(version)), ".")
	if n, err := strconv.Atoi(major); err == nil && n >= 5 {
		want = append(want, run("resp3")...)
	}
	if got := strings.TrimSpace(string(out)); got != strings.Join(want, "\n") {
		t.Fatalf("redis-py %s replied:\n%s\nwant:\n%s", strings.TrimSpace(string(version)), got, strings.Join(want, "\n"))
	}
}
