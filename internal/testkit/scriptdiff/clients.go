package scriptdiff

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Node returns the path of node and the folder holding node_modules
// (SLUICE_NODE_MODULES, which .ci/run fills with npm), or skips t when
// either, or one of the packages, is missing.
func Node(t testing.TB, packages ...string) (node, dir string) {
	t.Helper()
	dir = os.Getenv("SLUICE_NODE_MODULES")
	node, err := exec.LookPath("node")
	if dir == "" || err != nil {
		t.Skip("SLUICE_NODE_MODULES or node not set up (.ci/run installs the packages with npm)")
	}
	for _, p := range packages {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", p)); err != nil {
			t.Skipf("%s is not installed in SLUICE_NODE_MODULES", p)
		}
	}
	return node, dir
}

// RunNode runs the Node program script (a path) with args and returns its
// output, trimmed; it fails t when the program fails. Node resolves
// packages from the script's folder upwards: it runs a copy placed beside
// node_modules.
func RunNode(t testing.TB, node, dir, script string, args ...string) string {
	t.Helper()
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(dir, "sluice-*-"+filepath.Base(script))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if _, err := f.Write(src); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return run(t, exec.Command(node, append([]string{f.Name()}, args...)...))
}

// Run runs cmd and returns its output, trimmed, or fails t.
func run(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return strings.TrimSpace(string(out))
}

// RunProgram runs name with args and returns its output, trimmed, or
// fails t.
func RunProgram(t testing.TB, name string, args ...string) string {
	t.Helper()
	return run(t, exec.Command(name, args...))
}

// RedisRateOutcomes runs go-redis/redis_rate's Limiter (its GCRA scripts,
// which go-redis's Script.Run sends as EVALSHA, then EVAL after NOSCRIPT)
// over rdb in a fixed sequence of Allow, AllowN, AllowAtMost and Reset,
// with SCRIPT FLUSH in between, and returns each outcome: the decision and
// remaining count exactly, the retry and reset times in tens of seconds
// rounded up (the limits are per hour and per day: the milliseconds
// between two servers do not move them).
func RedisRateOutcomes(ctx context.Context, rdb redis.UniversalClient) ([]string, error) {
	l := redis_rate.NewLimiter(rdb)
	limits := []redis_rate.Limit{redis_rate.PerHour(5), {Rate: 10, Burst: 3, Period: time.Hour}, {Rate: 100, Burst: 100, Period: 24 * time.Hour}}
	for _, k := range []string{"alice", "bob", "{t}carol"} {
		if err := l.Reset(ctx, k); err != nil {
			return nil, fmt.Errorf("reset: %w", err)
		}
	}
	tens := func(d time.Duration) int64 {
		if d < 0 {
			return -1
		}
		return int64((d + 10*time.Second - 1) / (10 * time.Second))
	}
	var out []string
	seed := uint32(31)
	rnd := func(n uint32) int {
		seed = seed*1103515245 + 12345
		return int((seed >> 16) % n)
	}
	for i := range 120 {
		key := []string{"alice", "bob", "{t}carol"}[rnd(3)]
		lim := limits[rnd(uint32(len(limits)))]
		var (
			res  *redis_rate.Result
			err  error
			what string
		)
		switch rnd(10) {
		case 0:
			what = "script flush"
			err = rdb.ScriptFlush(ctx).Err()
		case 1:
			what = "reset"
			err = l.Reset(ctx, key)
		case 2, 3:
			n := 1 + rnd(4)
			what = fmt.Sprintf("allow-at-most %d", n)
			res, err = l.AllowAtMost(ctx, key, lim, n)
		default:
			n := 1 + rnd(2)
			what = fmt.Sprintf("allow-n %d", n)
			res, err = l.AllowN(ctx, key, lim, n)
		}
		if err != nil {
			return out, fmt.Errorf("%d %s %s: %w", i, key, what, err)
		}
		line := fmt.Sprintf("%d %s %s %s", i, key, lim, what)
		if res != nil {
			line += fmt.Sprintf(" allowed=%d remaining=%d retry=%d reset=%d", res.Allowed, res.Remaining, tens(res.RetryAfter), tens(res.ResetAfter))
		}
		out = append(out, line)
	}
	return out, nil
}
