package scriptdiff

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func one(c Call) Step { return Step{Calls: []Call{c}} }

// Libraries are the limiters whose scripts the differential test plays
// (resp/testdata/scripts/README.md says where each script comes from and
// what it is sent with). cluster leaves out the calls a cluster
// client does not make (limits' reset, a KEYS over the whole keyspace).
func Libraries(cluster bool) []Library {
	return []Library{
		springGateway(),
		springGatewayTimeArg(),
		redisRate(),
		rateLimiterFlexible(),
		rateLimitRedis(),
		pythonLimitsFixed(cluster),
		pythonLimitsMoving(),
		apisixLimitCount(),
		kongRateLimiting(),
		laravelRateLimiter(),
		bucket4jCAS(),
	}
}

// springKeys are RedisRateLimiter.getKeys(id, routeId).
func springKeys(routeID, id string) []string {
	p := "request_rate_limiter.{" + routeID + "." + id + "}."
	return []string{p + "tokens", p + "timestamp"}
}

// springGateway is RedisRateLimiter.isAllowed exactly, over RESP3 as
// Lettuce speaks it: the arguments replenishRate, burstCapacity, "" and
// requestedTokens, so the script takes its time from TIME. Bursts on fresh keys, compared when within one second
// of redis-server's clock.
func springGateway() Library {
	return Library{Name: "spring-cloud-gateway", Send: EvalshaEval, RESP3: true, Start: func() func(*rand.Rand, *int64) Step {
		return func(r *rand.Rand, _ *int64) Step {
			rate, capacity, requested := pick(r, 1, 2, 5), pick(r, 5, 10), pick(r, 1, 2, 3)
			keys := springKeys("route"+strconv.Itoa(r.IntN(3)), "user-"+strconv.FormatUint(r.Uint64(), 36))
			if r.IntN(2) == 0 { // releases before 4.2: no route in the key
				p := "request_rate_limiter.{user-" + strconv.FormatUint(r.Uint64(), 36) + "}."
				keys = []string{p + "tokens", p + "timestamp"}
			}
			args := []string{strconv.Itoa(rate), strconv.Itoa(capacity), "", strconv.Itoa(requested)}
			st := Step{SameSecond: true}
			for range capacity/requested + 3 {
				st.Calls = append(st.Calls, Call{Script: "spring_request_rate_limiter.lua", Keys: keys, Args: args})
			}
			return st
		}
	}}
}

// springGatewayTimeArg is Spring's script given the time as its third
// argument, which the script allows (tonumber(ARGV[3]) or TIME): a logical
// clock in seconds, so every reply compares byte for byte. The keys' TTL
// (twice the fill time) is at least 1000 s.
func springGatewayTimeArg() Library {
	type cfg struct{ rate, capacity, requested int }
	cfgs := []cfg{{1, 600, 100}, {2, 2000, 300}, {3, 1500, 250}, {1, 1000, 1}}
	return Library{Name: "spring-cloud-gateway-time-arg", Send: EvalshaEval, Start: func() func(*rand.Rand, *int64) Step {
		return func(r *rand.Rand, now *int64) Step {
			if r.IntN(6) == 0 {
				*now += pick(r, int64(1000), 5000, 60_000, 150_000)
			}
			id := r.IntN(len(cfgs))
			c := cfgs[id]
			return one(Call{Script: "spring_request_rate_limiter.lua", Keys: springKeys("route1", "user"+strconv.Itoa(id)),
				Args: []string{strconv.Itoa(c.rate), strconv.Itoa(c.capacity), itoa(*now / 1000), strconv.Itoa(c.requested)}})
		}
	}}
}

// redisRate is go-redis/redis_rate's Limiter.AllowN and AllowAtMost:
// arguments burst, rate, period seconds (a float64 go-redis writes as
// "3600"), n.
func redisRate() Library {
	type limit struct {
		rate, burst int
		period      string
	}
	limits := []limit{{10, 10, "3600"}, {5, 20, "3600"}, {100, 100, "86400"}, {1, 3, "3600"}}
	return Library{Name: "redis_rate", Send: EvalshaEval, RESP3: true, TimeWarp: true, Start: func() func(*rand.Rand, *int64) Step {
		return func(r *rand.Rand, _ *int64) Step {
			i := r.IntN(len(limits))
			l := limits[i]
			script, n := "redis_rate_allow_n.lua", pick(r, 1, 1, 1, 2, 5)
			if r.IntN(3) == 0 {
				script, n = "redis_rate_allow_at_most.lua", pick(r, 1, 3, 10)
			}
			return one(Call{Script: script, Keys: []string{"rate:user" + strconv.Itoa(i)},
				Args:    []string{strconv.Itoa(l.burst), strconv.Itoa(l.rate), l.period, strconv.Itoa(n)},
				Compare: compareGCRA})
		}
	}}
}

// compareGCRA compares redis_rate's replies {allowed, remaining,
// retry_after, reset_after} (see the package comment).
func compareGCRA(a, b string, elapsed time.Duration) error {
	va, err1 := Parse(a)
	vb, err2 := Parse(b)
	if err1 != nil || err2 != nil || len(va.Elems) != 4 || len(vb.Elems) != 4 {
		if a == b {
			return nil
		}
		return fmt.Errorf("not both 4-element arrays")
	}
	if va.Elems[0].Text(respwire.WithLengths) != vb.Elems[0].Text(respwire.WithLengths) {
		return fmt.Errorf("the decision differs")
	}
	if d := va.Elems[1].Int - vb.Elems[1].Int; va.Elems[1].Kind != respwire.Integer || vb.Elems[1].Kind != respwire.Integer || d < -1 || d > 1 {
		return fmt.Errorf("remaining differs by %d", d)
	}
	for i := 2; i < 4; i++ {
		x, errx := strconv.ParseFloat(va.Elems[i].Str, 64)
		y, erry := strconv.ParseFloat(vb.Elems[i].Str, 64)
		if va.Elems[i].Kind != respwire.BulkString || vb.Elems[i].Kind != respwire.BulkString || errx != nil || erry != nil ||
			x-y > 2+elapsed.Seconds() || y-x > 2+elapsed.Seconds() {
			return fmt.Errorf("element %d (seconds) differs beyond 2 s + %s", i+1, elapsed.Round(time.Millisecond))
		}
	}
	return nil
}

// rateLimiterFlexible is RateLimiterRedis's consume, penalty and reward
// (all its _upsert: the rlflxIncr script with points, duration, the
// limit's points and duration; reward sends negative points), and delete
// (DEL).
func rateLimiterFlexible() Library {
	type cfg struct {
		points   int
		duration int
	}
	cfgs := []cfg{{5, 1000}, {3, 3600}, {10, 86400}}
	return Library{Name: "rate-limiter-flexible", Send: EvalshaEval, Start: func() func(*rand.Rand, *int64) Step {
		return func(r *rand.Rand, _ *int64) Step {
			i := r.IntN(len(cfgs))
			c := cfgs[i]
			key := "rlflx:user" + strconv.Itoa(i)
			if r.IntN(25) == 0 {
				return one(Call{Cmd: []string{"del", key}})
			}
			return one(Call{Script: "flexible_incr_ttl.lua", Keys: []string{key},
				Args:    []string{pick(r, "1", "1", "1", "2", "-1"), strconv.Itoa(c.duration), strconv.Itoa(c.points), strconv.Itoa(c.duration)},
				Compare: TTLAt(1)})
		}
	}}
}

// rateLimitRedis is rate-limit-redis's RedisStore: increment (windowMs),
// get, decrement (DECR) and resetKey (DEL).
func rateLimitRedis() Library {
	return Library{Name: "rate-limit-redis", Send: LoadEvalsha,
		Load: []string{"rate_limit_redis_increment.lua", "rate_limit_redis_get.lua"},
		Start: func() func(*rand.Rand, *int64) Step {
			return func(r *rand.Rand, _ *int64) Step {
				key := "rl:10.0.0." + strconv.Itoa(r.IntN(4))
				switch r.IntN(20) {
				case 0:
					return one(Call{Cmd: []string{"DECR", key}})
				case 1:
					return one(Call{Cmd: []string{"DEL", key}})
				case 2, 3, 4:
					return one(Call{Script: "rate_limit_redis_get.lua", Keys: []string{key}, Compare: TTLAt(1)})
				}
				return one(Call{Script: "rate_limit_redis_increment.lua", Keys: []string{key},
					Args: []string{pick(r, "1000000", "3600000")}, Compare: TTLAt(1)})
			}
		}}
}

// limitsKey is limits' RateLimitItem.key_for: LIMITER/<key>/<amount>/<multiples>/<granularity>.
func limitsKey(r *rand.Rand, amount int) string {
	return fmt.Sprintf("LIMITER/10.0.0.%d/%d/1/hour", r.IntN(3), amount)
}

// pythonLimitsFixed is limits' RedisStorage.incr (fixed window, the
// incr_expire script: expiry, amount), get (GET) and reset (the clear_keys
// script over LIMITER*, not in a cluster).
func pythonLimitsFixed(cluster bool) Library {
	return Library{Name: "limits-fixed-window", Send: EvalshaLoad, Start: func() func(*rand.Rand, *int64) Step {
		return func(r *rand.Rand, _ *int64) Step {
			key := limitsKey(r, pick(r, 5, 10))
			switch {
			case r.IntN(10) == 0:
				return one(Call{Cmd: []string{"GET", key}})
			case !cluster && r.IntN(60) == 0:
				return one(Call{Script: "limits_clear_keys.lua", Keys: []string{"LIMITER*"}})
			}
			return one(Call{Script: "limits_incr_expire.lua", Keys: []string{key}, Args: []string{"3600", pick(r, "1", "1", "2")}})
		}
	}}
}

// pythonLimitsMoving is limits' moving window: acquire_entry (now as
// time.time() writes it, limit, expiry, amount) and get_moving_window
// (int(now - expiry), limit), on a logical clock.
func pythonLimitsMoving() Library {
	return Library{Name: "limits-moving-window", Send: EvalshaLoad, Start: func() func(*rand.Rand, *int64) Step {
		return func(r *rand.Rand, now *int64) Step {
			*now += pick(r, int64(0), 0, 7, 1000, 600_000, 1_800_000)
			limit := pick(r, 5, 10)
			key := limitsKey(r, limit)
			if r.IntN(4) == 0 {
				return one(Call{Script: "limits_moving_window.lua", Keys: []string{key},
					Args: []string{itoa(*now/1000 - 3600), strconv.Itoa(limit)}})
			}
			ts := fmt.Sprintf("%d.%03d%d", *now/1000, *now%1000, 1+r.IntN(9))
			return one(Call{Script: "limits_acquire_moving_window.lua", Keys: []string{key},
				Args: []string{ts, strconv.Itoa(limit), "3600", pick(r, "1", "1", "2")}})
		}
	}}
}

// apisixLimitCount is APISIX limit-count's redis policy: the commit script
// with limit, window and cost; now and then a negative cost, which the
// script's assert refuses (a Lua runtime error, whose text Redis writes
// with the script's SHA1).
func apisixLimitCount() Library {
	return Library{Name: "apisix-limit-count", Send: EvalshaEval, Start: func() func(*rand.Rand, *int64) Step {
		return func(r *rand.Rand, _ *int64) Step {
			i := r.IntN(3)
			limit := []string{"5", "10", "100"}[i]
			cost := pick(r, "1", "1", "1", "2", "0")
			if r.IntN(30) == 0 {
				cost = "-1"
			}
			return one(Call{Script: "apisix_limit_count.lua", Keys: []string{"plugin-limit-count:v1:/apisix/routes/1:3:10.0.0." + strconv.Itoa(i)},
				Args: []string{limit, pick(r, "3600", "1000"), cost}, Compare: TTLAt(1), MayFail: cost == "-1"})
		}
	}}
}

// kongRateLimiting is Kong's rate-limiting plugin with the redis policy:
// usage (the INCR+EXPIRE script, sync_rate -1, the default) and the
// batched sync (INCRBY+EXPIREAT, with the expiry Kong computes: the
// period's start in ms plus its seconds).
func kongRateLimiting() Library {
	const route, service = "5a2c5d3e-0000-4000-8000-000000000001", "5a2c5d3e-0000-4000-8000-000000000002"
	return Library{Name: "kong-rate-limiting", Send: EvalOnly, Start: func() func(*rand.Rand, *int64) Step {
		return func(r *rand.Rand, now *int64) Step {
			if r.IntN(10) == 0 {
				*now += 3_600_000
			}
			period, secs := pick(r, "hour", "day"), int64(3600)
			if period == "day" {
				secs = 86400
			}
			date := *now / (secs * 1000) * secs * 1000
			key := fmt.Sprintf("ratelimit:%s:%s:10.0.0.%d:%d:%s", route, service, r.IntN(3), date, period)
			if r.IntN(4) == 0 {
				return one(Call{Script: "kong_sync.lua", Keys: []string{key}, Args: []string{pick(r, "1", "2", "5"), itoa(date + secs)}})
			}
			return one(Call{Script: "kong_usage.lua", Keys: []string{key}, Args: []string{itoa(secs)}})
		}
	}}
}

// laravelRateLimiter is Laravel's RateLimiter::increment on the Redis
// cache store: add(key:timer, availableAt, decay) and add(key, 0, decay)
// (the add script), then INCRBY; and clear (DEL of both). (Its SETEX, when
// the counter vanished between add and INCRBY, never happens here.)
func laravelRateLimiter() Library {
	return Library{Name: "laravel-rate-limiter", Send: EvalOnly, Start: func() func(*rand.Rand, *int64) Step {
		return func(r *rand.Rand, now *int64) Step {
			h := sha1.Sum([]byte("route|10.0.0." + strconv.Itoa(r.IntN(3))))
			key := "laravel_cache_" + hex.EncodeToString(h[:])
			if r.IntN(15) == 0 {
				return Step{Calls: []Call{{Cmd: []string{"DEL", key}}, {Cmd: []string{"DEL", key + ":timer"}}}}
			}
			decay := pick(r, int64(3600), 86400)
			return Step{Calls: []Call{
				{Script: "laravel_add.lua", Keys: []string{key + ":timer"}, Args: []string{itoa(*now/1000 + decay), itoa(decay)}},
				{Script: "laravel_add.lua", Keys: []string{key}, Args: []string{"0", itoa(decay)}},
				{Cmd: []string{"INCRBY", key, pick(r, "1", "1", "3")}},
			}}
		}
	}}
}

// bucket4jCAS is bucket4j-redis's compare-and-swap: GET the bucket's
// state, then SET NX (no state yet) or compare-and-swap (the state read),
// with a TTL in ms or without; the state is binary. The generator keeps
// the state the servers should hold, and now and then swaps from a stale
// one, as a losing concurrent client does.
func bucket4jCAS() Library {
	return Library{Name: "bucket4j", Send: EvalOnly, Start: func() func(*rand.Rand, *int64) Step {
		state := map[string]string{}
		return func(r *rand.Rand, _ *int64) Step {
			key := "bucket:" + strconv.Itoa(r.IntN(3))
			b := make([]byte, 8+r.IntN(40))
			for i := range b {
				b[i] = byte(r.IntN(256))
			}
			next := string(b)
			ttl := itoa(int64(pick(r, 0, 10_000_000, 86_400_000)))
			get := Call{Cmd: []string{"GET", key}}
			cur, ok := state[key]
			var c Call
			switch {
			case !ok && ttl != "0":
				c = Call{Script: "bucket4j_set_nx_px.lua", Keys: []string{key}, Args: []string{next, ttl}}
			case !ok:
				c = Call{Script: "bucket4j_set_nx.lua", Keys: []string{key}, Args: []string{next}}
			default:
				orig := cur
				if r.IntN(5) == 0 {
					orig = next[:4] + cur[4:] // stale
				}
				if orig == cur {
					state[key] = next
				}
				if ttl != "0" {
					c = Call{Script: "bucket4j_cas_px.lua", Keys: []string{key}, Args: []string{orig, next, ttl}}
				} else {
					c = Call{Script: "bucket4j_cas.lua", Keys: []string{key}, Args: []string{orig, next}}
				}
			}
			if !ok {
				state[key] = next
			}
			return Step{Calls: []Call{get, c}}
		}
	}}
}
