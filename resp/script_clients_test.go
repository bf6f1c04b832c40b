package resp

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/pyredis"
	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/internal/testkit/scriptdiff"
)

// The real rate limiter libraries that send Lua scripts, each against
// redis-server and one sluice node: the same outcomes, line for line
// (cmd/sluice's TestScriptClientsCluster runs them on a 3-node cluster).

// scriptServers starts a redis-server and a sluice node (with its clock
// running, as in production) and returns their ports.
func scriptServers(t *testing.T) (redisPort, sluicePort string) {
	t.Helper()
	redisAddr := scriptdiff.StartRedis(t)
	sluiceAddr := startServer(t, Config{EnableDebug: true})
	_, redisPort, _ = strings.Cut(redisAddr, ":")
	_, sluicePort, _ = strings.Cut(sluiceAddr, ":")
	return redisPort, sluicePort
}

// sameOutcomes fails t unless got (sluice's) equals want (redis-server's)
// and want holds every line of must.
func sameOutcomes(t *testing.T, want, got string, must ...string) {
	t.Helper()
	if got != want {
		t.Fatalf("sluice and redis-server differ:\n%s", testkit.LineDiff("redis-server", want, "sluice", got, 5))
	}
	for _, m := range must {
		if !strings.Contains(want, m) {
			t.Errorf("outcome %q missing from:\n%s", m, want)
		}
	}
}

// TestRateLimiterFlexibleRedis: rate-limiter-flexible's RateLimiterRedis
// (the Lua one) over ioredis (EVALSHA, EVAL on NOSCRIPT) and over
// node-redis (RESP3; EVAL every time).
func TestRateLimiterFlexibleRedis(t *testing.T) {
	node, dir := scriptdiff.Node(t, "rate-limiter-flexible", "ioredis", "redis")
	redisPort, sluicePort := scriptServers(t)
	const script = "testdata/node/flexible_redis.mjs"
	for _, mode := range []string{"ioredis", "node-redis"} {
		want := scriptdiff.RunNode(t, node, dir, script, redisPort, mode)
		got := scriptdiff.RunNode(t, node, dir, script, sluicePort, mode)
		sameOutcomes(t, want, got, "rlflxlua:user1 rejected consumed=6 remaining=0 next=1000 first=false", "reward", "penalty", "delete true", "get null", "script flush OK")
	}
}

// TestRateLimitRedisStore: express-rate-limit with rate-limit-redis's
// RedisStore over ioredis, behind a real Express app.
func TestRateLimitRedisStore(t *testing.T) {
	node, dir := scriptdiff.Node(t, "rate-limit-redis", "express-rate-limit", "express", "ioredis")
	redisPort, sluicePort := scriptServers(t)
	const script = "testdata/node/rate_limit_redis.mjs"
	want := scriptdiff.RunNode(t, node, dir, script, redisPort)
	got := scriptdiff.RunNode(t, node, dir, script, sluicePort)
	sameOutcomes(t, want, got, "/a?who=alice 429 limit 3 remaining 0 reset 100", "get alice hits=5 resetsIn=100", "/f?who=dave 429 limit 2 remaining 0 reset 360")
}

// TestPythonLimits: Python's limits (Debian's python3-limits) with its
// RedisStorage over redis-py: fixed window, elastic expiry, reset, and the
// moving window where sluice has lists (issue #32).
func TestPythonLimits(t *testing.T) {
	python := pyredis.Find("limits.storage")
	if python == "" {
		t.Skip("no python3 with limits and redis-py (.ci/run installs Debian's python3-limits)")
	}
	redisPort, sluicePort := scriptServers(t)
	mode := "fixed"
	if r := rawDial(t, "127.0.0.1:"+sluicePort).do(t, "LLEN", "probe"); !strings.Contains(string(r), "unknown command") {
		mode = "moving"
	}
	const script = "testdata/python/limits_client.py"
	want := scriptdiff.RunProgram(t, python, script, redisPort, mode)
	got := scriptdiff.RunProgram(t, python, script, sluicePort, mode)
	sameOutcomes(t, want, got, "reset True", "fixed 5 per 1 hour alice 1/2 1/1 1/1 1/1 0/1 0/2 0/1 test False remaining=0 reset=360", "fixed after flush True remaining=4 reset=360")
}

// TestRedisRate: go-redis/redis_rate's Limiter over go-redis v9.
func TestRedisRate(t *testing.T) {
	redisPort, sluicePort := scriptServers(t)
	ctx := context.Background()
	outcomes := func(port string) string {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
		defer rdb.Close()
		out, err := scriptdiff.RedisRateOutcomes(ctx, rdb)
		if err != nil {
			t.Fatalf("port %s: %v", port, err)
		}
		return strings.Join(out, "\n")
	}
	want, got := outcomes(redisPort), outcomes(sluicePort)
	sameOutcomes(t, want, got, "allowed=0 remaining=0", "script flush")
}
