package resp

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/scriptdiff"
)

// TestLimiterScriptsDifferential plays the scripts of the Redis rate
// limiters people run (resp/testdata/scripts: Spring Cloud Gateway,
// redis_rate, rate-limiter-flexible, rate-limit-redis, Python's limits,
// APISIX, Kong, Laravel, bucket4j), each sent as its library sends it and
// with its keys and arguments, in seeded random sequences with SCRIPT FLUSH
// now and then (so the libraries meet NOSCRIPT and fall back as they do),
// on a real redis-server and on one sluice node with its clock frozen, and
// requires the same replies: byte for byte, except where a reply depends on
// the clock, which redis-server's cannot be frozen (internal/testkit/scriptdiff's
// comment says how each such reply is compared). Skipped without
// redis-server.
func TestLimiterScriptsDifferential(t *testing.T) {
	redisAddr := scriptdiff.StartRedis(t)
	sluiceAddr := startServer(t, Config{EnableDebug: true})
	testLimiterScripts(t, redisAddr, sluiceAddr, false)
}

// testLimiterScripts runs every library of scriptdiff.Libraries on the two
// servers.
func testLimiterScripts(t *testing.T, redisAddr, sluiceAddr string, cluster bool) {
	scripts, err := scriptdiff.LoadScripts("testdata/scripts")
	if err != nil {
		t.Fatal(err)
	}
	dial := func(addr string) *scriptdiff.Conn {
		c, err := scriptdiff.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	redisSide := &scriptdiff.Side{Name: "redis-server", Conn: dial(redisAddr)}
	sluiceSide := &scriptdiff.Side{Name: "sluice", Conn: dial(sluiceAddr), Sluice: true}
	hasLists := true
	if r, _ := sluiceSide.Conn.Do("LLEN", "scriptdiff-probe"); strings.HasPrefix(r, "-ERR unknown command") {
		hasLists = false
	}
	for _, lib := range scriptdiff.Libraries(cluster) {
		t.Run(lib.Name, func(t *testing.T) {
			if scriptdiff.NeedsLists(lib) && !hasLists {
				t.Skip("sluice has no lists yet (issue #32)")
			}
			rep := scriptdiff.Run(t, scripts, lib, redisSide, sluiceSide, scriptdiff.Options{Seeds: 3, Steps: 300, FlushEvery: 40, Flush: true})
			t.Logf("%d calls compared, %d bursts skipped (a second of redis-server's clock passed)", rep.Calls, rep.Skipped)
		})
	}
}
