// Package express holds the Go end-to-end test of the express-rate-limit
// store in this folder (index.js).
package express

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-rl/sluice/middleware/internal/sluicetest"
)

// TestExpressRateLimitStore runs Express with express-rate-limit and the
// sluice store against a real sluice: N+1 requests against a limit of N get
// N 200s and one 429 with Retry-After and the RateLimit fields. .ci/run
// installs express, express-rate-limit and redis with npm into the folder
// SLUICE_NODE_MODULES names; elsewhere the test is skipped.
func TestExpressRateLimitStore(t *testing.T) {
	dir := os.Getenv("SLUICE_NODE_MODULES")
	node, err := exec.LookPath("node")
	if dir == "" || err != nil {
		t.Skip("SLUICE_NODE_MODULES or node not set up (.ci/run installs express, express-rate-limit and redis with npm)")
	}
	for _, pkg := range []string{"express", "express-rate-limit", "redis"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg)); err != nil {
			t.Skipf("%s is not installed in %s (.ci/run installs it)", pkg, dir)
		}
	}
	addr := sluicetest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	// A frozen clock on a minute boundary: the window ends in exactly 60 s.
	if err := rdb.Do(context.Background(), "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
		t.Fatal(err)
	}
	store, err := filepath.Abs("index.js")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("testdata/e2e.mjs")
	if err != nil {
		t.Fatal(err)
	}
	// Node resolves packages from the script's folder upwards.
	script := filepath.Join(dir, "sluice-express-e2e.mjs")
	if err := os.WriteFile(script, src, 0o600); err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(addr, ":")
	const limit = 5
	out, err := exec.Command(node, script, port, store, "5").CombinedOutput()
	if err != nil {
		t.Fatalf("express: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != limit+1 {
		t.Fatalf("want %d responses, got:\n%s", limit+1, out)
	}
	// express-rate-limit writes the fields with a space after each ';'
	// and a partition key parameter, both allowed by the draft.
	policy := regexp.MustCompile(`^"api"; q=5; w=60; pk=:[A-Za-z0-9+/=]+:$`)
	for i, line := range lines {
		var res struct {
			Status     int
			RateLimit  string
			Policy     string
			RetryAfter *string
		}
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			t.Fatalf("response %d: %v: %s", i+1, err, line)
		}
		wantStatus, wantRL, wantRetry := 200, `"api"; r=`+strconv.Itoa(limit-1-i)+`; t=60`, ""
		if i == limit {
			wantStatus, wantRL, wantRetry = 429, `"api"; r=0; t=60`, "60"
		}
		retry := ""
		if res.RetryAfter != nil {
			retry = *res.RetryAfter
		}
		if res.Status != wantStatus || res.RateLimit != wantRL || retry != wantRetry || !policy.MatchString(res.Policy) {
			t.Fatalf("response %d: %s\nwant status %d, RateLimit %q, Retry-After %q, RateLimit-Policy matching %s",
				i+1, line, wantStatus, wantRL, wantRetry, policy)
		}
	}
}
