package resp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/scriptdiff"
)

// TestRateLimiterFlexible runs rate-limiter-flexible's
// RateLimiterRedisNonAtomic with ioredis against sluice and against
// redis-server, and requires the same outcomes (.ci/run installs both
// packages and sets SLUICE_NODE_MODULES; elsewhere the test is skipped).
func TestRateLimiterFlexible(t *testing.T) {
	dir := os.Getenv("SLUICE_NODE_MODULES")
	node, err := exec.LookPath("node")
	if dir == "" || err != nil {
		t.Skip("SLUICE_NODE_MODULES or node not set up (.ci/run installs ioredis and rate-limiter-flexible with npm)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "rate-limiter-flexible")); err != nil {
		t.Skip("rate-limiter-flexible is not installed in SLUICE_NODE_MODULES")
	}
	redisAddr := scriptdiff.StartRedis(t)
	sluiceAddr := startServer(t, Config{})
	src, err := os.ReadFile(filepath.Join("testdata", "node", "flexible.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	// Node resolves packages from the script's folder upwards: run a copy
	// placed beside node_modules.
	script := filepath.Join(dir, "sluice-flexible.mjs")
	if err := os.WriteFile(script, src, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(addr string) string {
		_, port, _ := strings.Cut(addr, ":")
		out, err := exec.Command(node, script, port).CombinedOutput()
		if err != nil {
			t.Fatalf("rate-limiter-flexible against %s: %v\n%s", addr, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	want, got := run(redisAddr), run(sluiceAddr)
	if got != want {
		t.Fatalf("sluice:\n%s\nredis-server:\n%s", got, want)
	}
	for _, line := range []string{"rejected 6 consumed=6 remaining=0 next=100", "get consumed=2 remaining=3 next=100", "delete true false", "ttl 100 type string"} {
		if !strings.Contains(got, line) {
			t.Errorf("outcome %q missing from:\n%s", line, got)
		}
	}
}

// TestRailsCacheStore runs ActiveSupport's RedisCacheStore (increment with
// expires_in: INCRBY, then TTL and EXPIRE) and Rack::Attack's counter on it
// (Debian's ruby-activesupport, ruby-redis and ruby-rack-attack) against
// sluice and against redis-server, and requires the same outcomes.
func TestRailsCacheStore(t *testing.T) {
	ruby, err := exec.LookPath("ruby")
	if err != nil {
		t.Skip("ruby is not on PATH")
	}
	if out, err := exec.Command(ruby, "-e", `require "active_support"; require "active_support/cache/redis_cache_store"; require "rack/attack"`).CombinedOutput(); err != nil {
		t.Skipf("activesupport, redis or rack-attack missing: %s", out)
	}
	redisAddr := scriptdiff.StartRedis(t)
	sluiceAddr := startServer(t, Config{})
	script, err := filepath.Abs(filepath.Join("testdata", "ruby", "cache_store.rb"))
	if err != nil {
		t.Fatal(err)
	}
	run := func(addr string) string {
		_, port, _ := strings.Cut(addr, ":")
		out, err := exec.Command(ruby, script, port).CombinedOutput()
		if err != nil {
			t.Fatalf("RedisCacheStore against %s: %v\n%s", addr, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	want, got := run(redisAddr), run(sluiceAddr)
	if got != want {
		t.Fatalf("sluice:\n%s\nredis-server:\n%s", got, want)
	}
	for _, line := range []string{"increment [1, 2, 3, 4]", "ttl hits 60", "rack-attack counts [1, 2, 3] type string ttl>0 true"} {
		if !strings.Contains(got, line) {
			t.Errorf("outcome %q missing from:\n%s", line, got)
		}
	}
}
