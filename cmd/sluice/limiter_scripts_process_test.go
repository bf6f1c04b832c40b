package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/pyredis"
	"github.com/sluice-rl/sluice/internal/slots"
	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/internal/testkit/scriptdiff"
)

// The Lua scripts of the Redis rate limiters people run (issue #31), on a
// 3-node cluster with --shards 3: the differential test and the real
// clients of resp's TestLimiterScriptsDifferential and script client tests,
// and a leader killed under Spring Cloud Gateway's script.

// scriptsDir holds the libraries' scripts and client programs (resp's test
// data).
const scriptsDir = "../../resp/testdata"

// TestLimiterScriptsShardedCluster runs, against a redis-server and a
// 3-node cluster with --shards 3 (through one node, which forwards the
// calls on keys of the groups it does not lead) and through each client's
// cluster-aware form, first the real clients (rate-limiter-flexible's
// RateLimiterRedis and rate-limit-redis over ioredis, Python's limits,
// go-redis/redis_rate), which must print the same outcomes, then the differential test of internal/testkit/scriptdiff with the
// cluster's clock frozen, which must give the same replies. Each group
// keeps the scripts EVAL loads on its keys, as each master of a Redis
// Cluster does, so a library may meet NOSCRIPT once per group and fall
// back where the single redis-server had the script: the differential
// allows that fallback.
func TestLimiterScriptsShardedCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	redisAddr := startRedisProcess(t)
	c := newBalancedShardCluster(t, false, "--cluster-timeout", healthyClusterTimeout)
	sluiceAddr := c.nodes[0].RESP
	_, redisPort, _ := net.SplitHostPort(redisAddr)
	_, sluicePort, _ := net.SplitHostPort(sluiceAddr)
	same := func(t *testing.T, want, got string) {
		t.Helper()
		if got != want {
			t.Fatalf("the cluster and redis-server differ:\n%s", testkit.LineDiff("redis-server", want, "sluice", got, 5))
		}
		if strings.Count(want, "\n") < 10 {
			t.Fatalf("too few outcomes:\n%s", want)
		}
	}
	// Each client runs once against redis-server, then against the
	// cluster through a plain connection to one node and through its
	// cluster-aware form.
	t.Run("rate-limiter-flexible", func(t *testing.T) {
		node, dir := scriptdiff.Node(t, "rate-limiter-flexible", "ioredis", "redis")
		script := filepath.Join(scriptsDir, "node", "flexible_redis.mjs")
		want := scriptdiff.RunNode(t, node, dir, script, redisPort)
		same(t, want, scriptdiff.RunNode(t, node, dir, script, sluicePort))
		same(t, want, scriptdiff.RunNode(t, node, dir, script, sluicePort, "cluster"))
		same(t, want, scriptdiff.RunNode(t, node, dir, script, sluicePort, "node-redis"))
	})
	t.Run("rate-limit-redis", func(t *testing.T) {
		node, dir := scriptdiff.Node(t, "rate-limit-redis", "express-rate-limit", "express", "ioredis")
		script := filepath.Join(scriptsDir, "node", "rate_limit_redis.mjs")
		want := scriptdiff.RunNode(t, node, dir, script, redisPort)
		same(t, want, scriptdiff.RunNode(t, node, dir, script, sluicePort))
		same(t, want, scriptdiff.RunNode(t, node, dir, script, sluicePort, "cluster"))
	})
	t.Run("limits", func(t *testing.T) {
		python := pyredis.Find("limits.storage")
		if python == "" {
			t.Skip("no python3 with limits and redis-py (.ci/run installs Debian's python3-limits)")
		}
		const mode = "moving" // the moving window: limits' lists
		script := filepath.Join(scriptsDir, "python", "limits_client.py")
		want := scriptdiff.RunProgram(t, python, script, redisPort, mode, "cluster")
		same(t, want, scriptdiff.RunProgram(t, python, script, sluicePort, mode, "cluster"))
		if pyredis.Find("redis.cluster") != "" {
			same(t, want, scriptdiff.RunProgram(t, python, script, sluicePort, mode, "clusterclient"))
		}
	})
	t.Run("redis_rate", func(t *testing.T) {
		outcomes := func(rdb redis.UniversalClient) string {
			defer rdb.Close()
			out, err := scriptdiff.RedisRateOutcomes(context.Background(), rdb)
			if err != nil {
				t.Fatal(err)
			}
			return strings.Join(out, "\n")
		}
		want := outcomes(redis.NewClient(&redis.Options{Addr: redisAddr}))
		same(t, want, outcomes(redis.NewClient(&redis.Options{Addr: sluiceAddr})))
		same(t, want, outcomes(redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{sluiceAddr}})))
	})
	t.Run("differential", func(t *testing.T) {
		scriptdiff.RunLibraries(t, filepath.Join(scriptsDir, "scripts"), redisAddr, sluiceAddr,
			scriptdiff.Options{Seeds: 1, Steps: 200, FlushEvery: 40, Flush: true, Cluster: true})
	})
}

// springOutcome classifies one call of Spring's script: a reply {1, n} is an
// acknowledged admission, {0, n} a denial; an error reply changed nothing
// unless it says UNCERTAIN; a failure to connect means the call was never
// sent; any other transport failure may have applied it.
func springOutcome(res []int64, err error) callOutcome {
	switch {
	case err == nil && len(res) == 2 && res[0] == 1:
		return outAdmitted
	case err == nil && len(res) == 2:
		return outDenied
	}
	return classify(nil, err)
}

// TestSpringScriptKillLeader: Spring Cloud Gateway's RedisRateLimiter
// script, sent as Spring sends it (EVALSHA, EVAL on NOSCRIPT; the time
// argument empty, so the script reads TIME, the entry's time), from clients
// on every node of a 3-node cluster with --shards 3 while the node leading
// group 1 is killed with SIGKILL (every group, group 1 under a new leader,
// then decides again) and later restarted. With the clock frozen
// no bucket refills, so each key's burst capacity is an exact limit: no
// key admits more acknowledged calls than its capacity, and once spent,
// its acknowledged admissions plus the calls that may have been applied
// reach it (no acknowledged admission was lost).
func TestSpringScriptKillLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	text, err := os.ReadFile(filepath.Join(scriptsDir, "scripts", "spring_request_rate_limiter.lua"))
	if err != nil {
		t.Fatal(err)
	}
	script := redis.NewScript(string(text))
	c := newBalancedShardCluster(t, false)
	ctx := context.Background()
	if err := c.client(c.nodes[0]).Do(ctx, "DEBUG", "CLOCK", "FREEZE", "1893456000000").Err(); err != nil {
		t.Fatal(err)
	}
	const capacity, callsPerKey = 10, 20
	args := []any{"1", strconv.Itoa(capacity), "", "1"} // replenishRate, burstCapacity, now (empty), requestedTokens
	keysOf := func(i int64) []string {
		p := "request_rate_limiter.{route1.user" + strconv.FormatInt(i, 10) + "}."
		return []string{p + "tokens", p + "timestamp"}
	}
	l := newGroupLoad[int64](c)
	table := shardTable(t)
	groupOf := func(id int64) int { return table.Group(slots.Of([]byte(keysOf(id)[0]))) }
	var next atomic.Int64
	for _, p := range c.nodes {
		cl := c.client(p)
		l.start(func() {
			id := next.Add(1) / callsPerKey
			res, err := script.Run(ctx, cl, keysOf(id), args...).Int64Slice()
			l.record(id, groupOf(id), springOutcome(res, err), err)
		})
	}
	defer l.stop()
	l.waitDecided("before the kill", 50, 0, 30*time.Second)
	victim := c.preferred(1)
	killed := time.Now()
	c.kill(victim)
	l.waitDecided("after the kill", 50, killed.UnixNano(), 30*time.Second) // group 1 too, under a new leader
	c.start(victim)
	c.waitServing(victim)
	l.waitDecided("after the restart", 30, time.Now().UnixNano(), 30*time.Second)
	l.stop()

	// Spend every key touched (nothing fails now: every call decides).
	cl := c.client(c.nodes[0])
	exact, uncertain := l.spendAll(capacity, func(id int64) bool {
		res, err := script.Run(ctx, cl, keysOf(id), args...).Int64Slice()
		if err != nil || len(res) != 2 {
			t.Fatalf("spending user%d: %v %v", id, res, err)
		}
		return res[0] != 0
	})
	if len(l.tallies) < 10 {
		t.Fatalf("only %d keys touched", len(l.tallies))
	}
	t.Logf("%d decisions on %d keys, %d uncertain calls, %d keys admitted exactly %d; errors: %v", l.decisions(), len(l.tallies), uncertain, exact, capacity, l.errs)
}
