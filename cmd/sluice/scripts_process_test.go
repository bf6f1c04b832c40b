package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"
)

// springScript is Spring Cloud Gateway's request_rate_limiter.lua in
// substance (a token bucket on two string keys, its clock from TIME).
const springScript = `local tokens_key = KEYS[1]
local timestamp_key = KEYS[2]
local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local now = tonumber(redis.call('TIME')[1])
local requested = tonumber(ARGV[4])
local fill_time = capacity/rate
local ttl = math.floor(fill_time*2)
local last_tokens = tonumber(redis.call("get", tokens_key))
if last_tokens == nil then
  last_tokens = capacity
end
local last_refreshed = tonumber(redis.call("get", timestamp_key))
if last_refreshed == nil then
  last_refreshed = 0
end
local delta = math.max(0, now-last_refreshed)
local filled_tokens = math.min(capacity, last_tokens+(delta*rate))
local allowed = filled_tokens >= requested
local new_tokens = filled_tokens
local allowed_num = 0
if allowed then
  new_tokens = filled_tokens - requested
  allowed_num = 1
end
if ttl > 0 then
  redis.call("setex", tokens_key, ttl, new_tokens)
  redis.call("setex", timestamp_key, ttl, now)
end
return { allowed_num, new_tokens }`

// TestClusterScripts: on three durable nodes with a frozen clock, Spring's
// script sent by EVALSHA to every node admits exactly its capacity across
// a leader's death (no acknowledged admission lost, none past the limit);
// an endless loop, deep recursion, a huge string.rep and a growing table
// each return the budget error, the replicas' digests stay equal, and the
// group serves right after.
func TestClusterScripts(t *testing.T) {
	// A smaller step budget: the test binary may run under the race
	// detector, ten times slower.
	c := newTestClusterWith(t, 3, func(ps []*proc) {
		for _, p := range ps {
			p.Extra = append(p.Extra, "--script-max-steps", "100000")
		}
	})
	c.waitServing(c.nodes...)
	c.waitNewestVersion(c.nodes...)
	ctx := context.Background()
	do := func(i int, args ...any) (any, error) {
		return c.client(c.nodes[i]).Do(ctx, args...).Result()
	}
	if _, err := do(0, "DEBUG", "CLOCK", "FREEZE", "1893456000000"); err != nil {
		t.Fatal(err)
	}
	sha, err := do(1, "SCRIPT", "LOAD", springScript)
	if err != nil {
		t.Fatal(err)
	}
	admitted := 0
	request := func(i int) error {
		v, err := do(i, "EVALSHA", sha, "2", "{u}.tokens", "{u}.timestamp", "1", "10", "", "1")
		if err != nil {
			return err
		}
		if arr, ok := v.([]any); ok && len(arr) == 2 && arr[0] == int64(1) {
			admitted++
		}
		return nil
	}
	for i := 0; i < 6; i++ {
		if err := request(i % 3); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	leader := c.leader()
	c.kill(leader)
	var alive []int
	for i, p := range c.nodes {
		if p != leader {
			alive = append(alive, i)
		}
	}
	for i := 0; i < 9; i++ {
		// A node may answer CLUSTERDOWN (not applied) while the survivors
		// elect: ask again.
		waitFor(t, 20*time.Second, "a request after the leader's death", func() bool {
			err := request(alive[i%2])
			return err == nil || !strings.HasPrefix(err.Error(), "CLUSTERDOWN")
		})
	}
	if admitted != 10 {
		t.Fatalf("%d of 15 requests admitted across a failover, want the capacity 10", admitted)
	}
	c.start(leader)
	c.waitServing(c.nodes...)
	for _, tc := range []struct{ script, want string }{
		{"redis.call('SET', KEYS[1], 'x') while true do end", "ERR script exceeded its budget of"},
		{"redis.call('SET', KEYS[1], 'x') local function f() return f() + 1 end return f()", "ERR script exceeded its budget of"},
		{"redis.call('SET', KEYS[1], 'x') return string.rep('x', 1e9)", "ERR script exceeded its budget of"},
		{"redis.call('SET', KEYS[1], 'x') local t = {} while true do t[#t+1] = 'x' end", "ERR script exceeded its budget of"},
	} {
		_, err := do(2, "EVAL", tc.script, "1", "budget")
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want %s...", tc.script, err, tc.want)
		}
		if v, err := do(1, "EXISTS", "budget"); err != nil || v != int64(0) {
			t.Fatalf("after %s: EXISTS %v %v: the stopped script's write stayed", tc.script, v, err)
		}
	}
	digest := c.sameDigest("the replicas' digests", 30*time.Second)
	if !strings.HasSuffix(digest, " 2") {
		t.Fatalf("digest %q: want Spring's two keys", digest)
	}
	if v, err := do(0, "EVALSHA", sha, "2", "{u}.tokens", "{u}.timestamp", "1", "10", "", "1"); err != nil || fmt.Sprint(v) != "[0 0]" {
		t.Fatalf("EVALSHA on the restarted node: %v %v", v, err)
	}
}

// TestScriptsSurviveRestart: on a durable single node, the scripts loaded
// before a snapshot and after it, and what they wrote, survive a SIGKILL
// and a restart.
func TestScriptsSurviveRestart(t *testing.T) {
	ctx := context.Background()
	incr := "return redis.call('INCRBY', KEYS[1], ARGV[1])"
	r := killRestartAfter(t, [][]any{
		{"SCRIPT", "LOAD", "return 'before'"},
		{"EVAL", incr, "1", "k", "5"},
		{"RAFT.SNAPSHOT"},
		{"SCRIPT", "LOAD", "return 'after'"},
		{"EVAL", incr, "1", "k", "2"},
	})
	for _, body := range []string{"return 'before'", "return 'after'", incr} {
		sum := sha1.Sum([]byte(body))
		ok, err := r.ScriptExists(ctx, hex.EncodeToString(sum[:])).Result()
		if err != nil || len(ok) != 1 || !ok[0] {
			t.Errorf("SCRIPT EXISTS of %q after the restart: %v %v", body, ok, err)
		}
	}
	if v, err := r.Get(ctx, "k").Result(); err != nil || v != "7" {
		t.Fatalf("GET k after the restart: %v %v", v, err)
	}
}
