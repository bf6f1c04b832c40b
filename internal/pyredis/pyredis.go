// Package pyredis finds a Python interpreter with redis-py, for the tests
// that drive sluice from real Python clients (.ci/run installs Debian's
// python3-redis; elsewhere those tests skip).
package pyredis

import (
	"os/exec"
	"testing"
)

// Find returns the path of a python3 that can import module (such as
// "redis" or "redis.cluster"), trying /usr/bin/python3 first and then
// python3 on PATH, or "" when there is none.
func Find(module string) string {
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import "+module).Run() == nil {
			return path
		}
	}
	return ""
}

// Require returns Find("redis"), or skips t when there is no python3 with
// redis-py.
func Require(t testing.TB) string {
	t.Helper()
	python := Find("redis")
	if python == "" {
		t.Skip("no python3 with redis-py (.ci/run installs Debian's python3-redis)")
	}
	return python
}
