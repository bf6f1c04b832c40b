package bench

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// startRedisForTest starts a redis-server with the scripts loaded, or skips
// the test when redis-server is not on PATH.
func startRedisForTest(t *testing.T) *Target {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not on PATH")
	}
	tgt, err := StartTarget(testCtx(t), ServerConfig{RedisBin: bin, WorkDir: t.TempDir()}, TargetRedis)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tgt.Stop(); err != nil {
			t.Error(err)
		}
	})
	return tgt
}

// fillThenCall makes n calls on key, each of which must be allowed with
// the remaining count going down to 0, and returns the reply of one more.
func fillThenCall(t *testing.T, ctx context.Context, c *respwire.Conn, d Dialect, a Algorithm, key string, p Params, n int) []int64 {
	t.Helper()
	for i := range n {
		if r := call(t, ctx, c, d, a, key, p); r[0] != 1 || r[2] != int64(n-1-i) {
			t.Fatalf("call %d: %v", i+1, r)
		}
	}
	return call(t, ctx, c, d, a, key, p)
}

// call runs one EVALSHA of the algorithm's script and returns its five integers.
func call(t *testing.T, ctx context.Context, c *respwire.Conn, d Dialect, a Algorithm, key string, p Params) []int64 {
	t.Helper()
	tpl, err := d.Template(a, p)
	if err != nil {
		t.Fatal(err)
	}
	c.AppendRaw(tpl.Append(nil, []byte(key)))
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	v, err := c.ReadReply()
	if err != nil {
		t.Fatal(err)
	}
	if v.Kind == respwire.Integer { // the anchor script's 1 or 0
		return []int64{v.Int}
	}
	ints, ok := v.Ints()
	if !ok {
		t.Fatalf("%s %s: %v", a, key, v)
	}
	return ints
}

func TestScriptSHAs(t *testing.T) {
	files, err := luaFS.ReadDir("lua")
	if err != nil || len(files) != 6 {
		t.Fatalf("lua/ has %d scripts, want the anchor and one per algorithm: %v", len(files), err)
	}
	for _, f := range files {
		src, err := luaFS.ReadFile("lua/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		sum := sha1.Sum(src)
		if ScriptSHA(f.Name()) != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: sha mismatch", f.Name())
		}
		if !strings.Contains(string(src), "redis.call") {
			t.Errorf("%s does not look like a Redis script", f.Name())
		}
	}
	for _, a := range Algorithms() {
		if ScriptSHA(commands[a][1]) == "" {
			t.Errorf("no script for %s", a)
		}
	}
	if ScriptSHA("nope.lua") != "" {
		t.Error("sha of a missing script")
	}
}

// The checks use limits that a slow machine cannot refill during the test
// (rates of one unit a minute or an hour, windows of an hour), so that no
// assertion depends on timing beyond a generous bound.
func TestLuaScriptsAgainstRedis(t *testing.T) {
	tgt := startRedisForTest(t)
	ctx := testCtx(t)
	c, err := dial(tgt.Addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lua := LuaDialect

	t.Run("token", func(t *testing.T) {
		p := Params{Limit: 4, RateN: 4, Period: time.Minute, Cost: 1} // RL.TOKEN k 4 4/m
		for i := range 4 {
			r := call(t, ctx, c, lua, AlgToken, "tok", p)
			if r[0] != 1 || r[1] != 4 || r[2] != int64(3-i) || r[3] != 0 {
				t.Fatalf("call %d: %v", i+1, r)
			}
		}
		r := call(t, ctx, c, lua, AlgToken, "tok", p)
		if r[0] != 0 || r[2] != 0 || r[3] < 14000 || r[3] > 15000 || r[4] < 59000 || r[4] > 60000 {
			t.Fatalf("fifth call: %v, want denied, retry_after about 15000, reset_after about 60000", r)
		}
		p.Cost = 5
		if r := call(t, ctx, c, lua, AlgToken, "tok", p); r[0] != 0 || r[3] != -1 {
			t.Fatalf("cost above capacity: %v, want retry -1", r)
		}
		p.Cost = 0
		if r := call(t, ctx, c, lua, AlgToken, "fresh", p); r[0] != 1 || r[2] != 4 || r[4] != 0 {
			t.Fatalf("peek on a new key: %v", r)
		}
		if n, _ := c.Do(time.Second, "EXISTS", "fresh"); n.Int != 0 {
			t.Fatal("a peek created state")
		}
	})

	t.Run("leaky", func(t *testing.T) {
		p := Params{Limit: 2, RateN: 1, Period: time.Minute, Cost: 1}
		r := fillThenCall(t, ctx, c, lua, AlgLeaky, "lk", p, 2)
		if r[0] != 0 || r[3] < 59000 || r[3] > 60000 || r[4] < 119000 || r[4] > 120000 {
			t.Fatalf("third call: %v, want denied, retry about 60000, reset about 120000", r)
		}
	})

	t.Run("fixed", func(t *testing.T) {
		p := Params{Limit: 5, Period: time.Hour, Cost: 2}
		a := call(t, ctx, c, lua, AlgFixed, "fx", p)
		b := call(t, ctx, c, lua, AlgFixed, "fx", p)
		d := call(t, ctx, c, lua, AlgFixed, "fx", p)
		if a[0] != 1 || a[2] != 3 || b[0] != 1 || b[2] != 1 || d[0] != 0 || d[2] != 1 {
			t.Fatalf("limit 5, cost 2, three calls: %v %v %v", a, b, d)
		}
		// a window boundary may fall between the calls only once an hour
		if d[3] <= 0 || d[3] > 3600_000 || d[4] != d[3] {
			t.Fatalf("denied: retry %d reset %d, want both the time to the window's end", d[3], d[4])
		}
		p.Cost = 1
		if r := call(t, ctx, c, lua, AlgFixed, "fx", p); r[0] != 1 || r[2] != 0 {
			t.Fatalf("the last unit: %v", r)
		}
	})

	t.Run("sliding", func(t *testing.T) {
		p := Params{Limit: 3, Period: time.Hour, Cost: 1}
		for i := range 3 {
			if r := call(t, ctx, c, lua, AlgSliding, "sl", p); r[0] != 1 {
				t.Fatalf("call %d: %v", i+1, r)
			}
		}
		r := call(t, ctx, c, lua, AlgSliding, "sl", p)
		if r[0] != 0 || r[3] <= 0 || r[4] <= 0 {
			t.Fatalf("fourth call: %v, want denied with retry and reset", r)
		}
	})

	t.Run("log", func(t *testing.T) {
		p := Params{Limit: 2, Period: time.Minute, Cost: 1} // RL.LOG k 2 1m
		r := fillThenCall(t, ctx, c, lua, AlgLog, "lg", p, 2)
		if r[0] != 0 || r[3] < 55000 || r[3] > 60000 || r[4] < 55000 || r[4] > 60000 {
			t.Fatalf("third call: %v, want denied, retry and reset about 60000", r)
		}
		if n, _ := c.Do(time.Second, "ZCARD", "lg"); n.Int != 2 {
			t.Fatalf("the log holds %d entries, want 2 (a denied call logs nothing)", n.Int)
		}
		p.Cost = 3
		if r := call(t, ctx, c, lua, AlgLog, "lg2", p); r[0] != 0 || r[3] != -1 {
			t.Fatalf("cost above limit: %v", r)
		}
	})

	t.Run("anchor", func(t *testing.T) {
		p := Params{Limit: 1, RateN: 1, Period: time.Hour, Cost: 1}
		if r := call(t, ctx, c, AnchorDialect, AlgToken, "anc", p); len(r) != 1 || r[0] != 1 {
			t.Fatalf("first: %v", r)
		}
		if r := call(t, ctx, c, AnchorDialect, AlgToken, "anc", p); len(r) != 1 || r[0] != 0 {
			t.Fatalf("second: %v", r)
		}
	})
}

// TestLoadAgainstRedis runs every workload briefly, with a denied share,
// through the load loop against Redis: no error replies, and the share
// denied as asked.
func TestLoadAgainstRedis(t *testing.T) {
	tgt := startRedisForTest(t)
	for _, a := range Algorithms() {
		w := Workload{Alg: a, Keys: 100, Dist: DistUniform, Cost: 2, DenyShare: 0.5}
		res, err := RunLoad(testCtx(t), w, tgt.Dialect, LoadOptions{Addrs: tgt.Addrs, Conns: 1, Pipeline: 8, Requests: 400, Seed: 1})
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		if res.Errors != 0 || res.Requests != 400 {
			t.Fatalf("%s: %d requests, %d errors (%s)", a, res.Requests, res.Errors, res.FirstError)
		}
		if d := res.DenyShare(); d < 0.4 || d > 0.6 {
			t.Errorf("%s: denied share %.2f, want about 0.5", a, d)
		}
	}
	rss, err := ProcessRSS(tgt.PIDs())
	if err != nil || rss <= 0 {
		t.Errorf("RSS %d %v", rss, err)
	}
	if _, err := tgt.Do(testCtx(t), "FLUSHALL"); err != nil {
		t.Error(err)
	}
	if v, err := tgt.Do(testCtx(t), "DBSIZE"); err != nil || v.Int != 0 {
		t.Errorf("DBSIZE after FLUSHALL: %v %v", v, err)
	}
}

// TestIncrExpireLoad runs the incr-expire workload (INCRBY then EXPIRE, two
// replies per request) against Redis and against sluice in memory: every
// request counted once as allowed, and the counters add up to the requests
// times the cost, each with an expiry.
func TestIncrExpireLoad(t *testing.T) {
	targets := []*Target{startRedisForTest(t)}
	if os.Getenv("SLUICE_BIN") != "" {
		r := quietRunner(ServerConfig{SluiceBin: sluiceBin(t), WorkDir: t.TempDir()})
		t.Cleanup(func() { _ = r.Env.Close() })
		tg, err := r.Env.Get(testCtx(t), TargetSluiceMem)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, tg)
	}
	for _, tgt := range targets {
		w := Workload{Alg: AlgIncrExpire, Keys: 20, Dist: DistUniform, Cost: 3, Prefix: "ie:"}
		res, err := RunLoad(testCtx(t), w, tgt.Dialect, LoadOptions{Addrs: tgt.Addrs, Conns: 2, Pipeline: 16, Requests: 400, Seed: 1})
		if err != nil {
			t.Fatalf("%s: %v", tgt.Name, err)
		}
		if res.Errors != 0 || res.Requests != 400 || res.Allowed != 400 {
			t.Fatalf("%s: %d requests, %d allowed, %d errors (%s)", tgt.Name, res.Requests, res.Allowed, res.Errors, res.FirstError)
		}
		sum := int64(0)
		for i := range uint64(w.Keys) {
			key := AppendKey([]byte(w.Prefix), "", i)
			v, err := tgt.Do(testCtx(t), "GET", string(key))
			if err != nil {
				t.Fatal(err)
			}
			if !v.Null {
				n, _ := strconv.ParseInt(v.Str, 10, 64)
				sum += n
				if ttl, _ := tgt.Do(testCtx(t), "TTL", string(key)); ttl.Int <= 0 {
					t.Errorf("%s: %s has no expiry (TTL %+v)", tgt.Name, key, ttl)
				}
			}
		}
		t.Logf("%s: counters sum to %d", tgt.Name, sum)
		// The warm-up's requests count too: at least the measured ones.
		if sum < 3*400 || sum%3 != 0 {
			t.Errorf("%s: counters sum to %d for 400 requests of cost 3", tgt.Name, sum)
		}
	}
}
