// Package python holds the Go end-to-end test of the Flask/FastAPI helper
// in this folder (sluice_ratelimit.py).
package python

import (
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-rl/sluice/internal/pyredis"
	"github.com/sluice-rl/sluice/middleware/internal/sluicetest"
)

// TestFlaskFastAPI runs Flask and FastAPI views behind the helper against a
// real sluice: N+1 requests against a limit of N get N 200s and one 429
// with Retry-After and the RateLimit fields. .ci/run installs Debian's
// python3-redis, python3-flask, python3-fastapi and python3-httpx; a
// framework that does not import is skipped, and so is the test without
// python3 and redis-py.
func TestFlaskFastAPI(t *testing.T) {
	python := pyredis.Require(t)
	var frameworks []string
	for fw, imports := range map[string]string{"flask": "import flask", "fastapi": "import fastapi, httpx"} {
		if exec.Command(python, "-c", imports).Run() == nil {
			frameworks = append(frameworks, fw)
		} else {
			t.Logf("%s: %q fails: not tested (.ci/run installs Debian's python3-flask, python3-fastapi, python3-httpx)", fw, imports)
		}
	}
	if len(frameworks) == 0 {
		t.Skip("neither Flask nor FastAPI imports (.ci/run installs them)")
	}
	addr := sluicetest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	// A frozen clock on a minute boundary: the window ends in exactly 60 s.
	if err := rdb.Do(context.Background(), "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(addr, ":")
	const limit = 5
	out, err := exec.Command(python, "testdata/e2e.py", port, strconv.Itoa(limit), strings.Join(frameworks, ",")).CombinedOutput()
	if err != nil {
		t.Fatalf("e2e.py: %v\n%s", err, out)
	}
	count := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var res struct {
			Framework  string
			Status     int
			RateLimit  string
			Policy     string
			RetryAfter *string
		}
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			t.Fatalf("%v: %s\n%s", err, line, out)
		}
		i := count[res.Framework]
		count[res.Framework]++
		wantStatus, wantRL, wantRetry := 200, `"api";r=`+strconv.Itoa(limit-1-i)+`;t=60`, ""
		if i == limit {
			wantStatus, wantRL, wantRetry = 429, `"api";r=0;t=60`, "60"
		}
		retry := ""
		if res.RetryAfter != nil {
			retry = *res.RetryAfter
		}
		if res.Status != wantStatus || res.RateLimit != wantRL || retry != wantRetry || res.Policy != `"api";q=5;w=60` {
			t.Fatalf("%s response %d: %s\nwant status %d, RateLimit %q, Retry-After %q, RateLimit-Policy %q",
				res.Framework, i+1, line, wantStatus, wantRL, wantRetry, `"api";q=5;w=60`)
		}
	}
	t.Logf("tested: %v", frameworks)
	for _, fw := range frameworks {
		if count[fw] != limit+1 {
			t.Fatalf("%s: %d responses, want %d\n%s", fw, count[fw], limit+1, out)
		}
	}
}
