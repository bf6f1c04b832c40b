package resp

import (
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
	scriptdiff.RunLibraries(t, "testdata/scripts", redisAddr, sluiceAddr, scriptdiff.Options{Seeds: 3, Steps: 300, FlushEvery: 40, Flush: true})
}
