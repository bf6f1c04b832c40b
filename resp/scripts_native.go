package resp

import (
	"bytes"
	"math"
	"strconv"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/script"
)

// Scripts run natively (SPEC section 14: "A script may be run natively
// once recognised by its SHA1 only if its replies and its effects on the
// state are identical to the interpreted run"). A native script computes
// what its Lua computes, with Lua's numbers (float64, tonumber of the
// stored strings, %.17g for the numbers passed to redis.call, a reply's
// numbers truncated to integers), and calls the same commands through
// the same fake client (scriptHost.Call), so the nested ops, their keys,
// values and TTLs are the interpreted run's. Anything unusual (a missing
// or non-numeric argument, an error reply such as WRONGTYPE or a limit,
// a read-only run, a TTL past what SETEX takes, a budget smaller than the
// script needs) undoes what the native run did and runs the Lua instead,
// so no error path is reimplemented. ScriptConfig.NoNative (--script-native
// false) turns it off; TestNativeScriptsMatchInterpreter and
// TestNativeGCRAMatchesInterpreter compare both.

// springSHA is the SHA1 of Spring Cloud Gateway's request_rate_limiter.lua
// (resp/testdata/scripts/spring_request_rate_limiter.lua).
const springSHA = "0ad5736ed1c04aae6ec194376c784b89b8c08a7a"

// gcraSHA is the SHA1 of go-redis/redis_rate v10's allowN script
// (resp/testdata/scripts/redis_rate_allow_n.lua).
const gcraSHA = "f52a5b566060d79fd321d695df55bc918339c4aa"

// Budgets below which the native path defers to the interpreter, which
// would run out of them (the Spring script takes a few hundred steps and
// a few hundred bytes).
const (
	nativeMinSteps  = 10_000
	nativeMinMemory = 64 << 10
)

// runNative runs tx's script natively when it is one this runner knows;
// ok is false (and nothing changed) when the interpreter must run it.
func (r *ScriptRunner) runNative(tx *engine.ScriptTx, h *scriptHost) (reply []byte, ok bool) {
	if r.noNative || h.ro || r.maxSteps < nativeMinSteps || r.maxMemory < nativeMinMemory {
		return nil, false
	}
	switch tx.SHA() {
	case springSHA:
		reply, ok = h.spring(tx)
	case gcraSHA:
		reply, ok = h.gcra(tx)
	default:
		return nil, false
	}
	if !ok {
		tx.Undo()
	}
	return reply, ok
}

// spring is request_rate_limiter.lua:
//
//	local rate = tonumber(ARGV[1])
//	local capacity = tonumber(ARGV[2])
//	local now = tonumber(ARGV[3]) or redis.call('TIME')[1]
//	local requested = tonumber(ARGV[4])
//	local fill_time = capacity / rate
//	local ttl = math.floor(fill_time * 2)
//	local last_tokens = tonumber(redis.call("get", tokens_key)) or capacity
//	local last_refreshed = tonumber(redis.call("get", timestamp_key)) or 0
//	local delta = math.max(0, now-last_refreshed)
//	local filled_tokens = math.min(capacity, last_tokens+(delta*rate))
//	local allowed = filled_tokens >= requested
//	local new_tokens = allowed and filled_tokens - requested or filled_tokens
//	if ttl > 0 then
//	  redis.call("setex", tokens_key, ttl, new_tokens)
//	  redis.call("setex", timestamp_key, ttl, now)
//	end
//	return { allowed and 1 or 0, new_tokens }
func (h *scriptHost) spring(tx *engine.ScriptTx) ([]byte, bool) {
	args := tx.Args()
	if tx.NumKeys() != 2 || len(args) != 6 {
		return nil, false
	}
	tokensKey, tsKey := args[0], args[1]
	rate, ok1 := script.ToNumber(args[2])
	capacity, ok2 := script.ToNumber(args[3])
	requested, ok3 := script.ToNumber(args[5])
	if !ok1 || !ok2 || !ok3 {
		return nil, false // arithmetic on nil: the Lua's error
	}
	h.nowArg = h.nowArg[:0]
	now, ok := script.ToNumber(args[4])
	if ok {
		h.nowArg = script.FormatArg(h.nowArg, now)
	} else {
		// TIME's seconds, a string: passed to SETEX as is, a number
		// (its digits) in the arithmetic.
		secs, ok := firstBulk(h.call(h.r.native.time, h.names.time))
		if !ok {
			return nil, false
		}
		h.nowArg = append(h.nowArg, secs...)
		if now, ok = script.ToNumber(h.nowArg); !ok {
			return nil, false
		}
	}
	fillTime := capacity / rate
	ttl := math.Floor(fillTime * 2)
	lastTokens, ok := h.getNumber(tokensKey, capacity)
	if !ok {
		return nil, false
	}
	lastRefreshed, ok := h.getNumber(tsKey, 0)
	if !ok {
		return nil, false
	}
	delta := 0.0
	if d := now - lastRefreshed; d > delta {
		delta = d
	}
	filled := capacity
	// float64() keeps the product rounded on its own, as Lua's
	// separate instructions do (no fused multiply-add).
	if f := lastTokens + float64(delta*rate); f < filled {
		filled = f
	}
	allowed := filled >= requested
	newTokens := filled
	if allowed {
		newTokens = filled - requested
	}
	if ttl > 0 {
		if !(ttl <= 1e9) {
			return nil, false // SETEX's range and %.17g's integers: the interpreter
		}
		h.ttlArg = script.FormatArg(h.ttlArg[:0], ttl)
		h.valArg = script.FormatArg(h.valArg[:0], newTokens)
		if !isOK(h.call(h.r.native.setex, h.names.setex, tokensKey, h.ttlArg, h.valArg)) || !isOK(h.call(h.r.native.setex, h.names.setex, tsKey, h.ttlArg, h.nowArg)) {
			return nil, false
		}
	}
	reply := make([]byte, 0, 32)
	reply = append(reply, "*2\r\n:"...)
	if allowed {
		reply = append(reply, '1')
	} else {
		reply = append(reply, '0')
	}
	reply = append(reply, "\r\n:"...)
	reply = strconv.AppendInt(reply, script.ToInteger(newTokens), 10)
	return append(reply, '\r', '\n'), true
}

// gcra is redis_rate's allowN (GCRA):
//
//	local burst = ARGV[1]
//	local rate = ARGV[2]
//	local period = ARGV[3]
//	local cost = tonumber(ARGV[4])
//	local emission_interval = period / rate
//	local increment = emission_interval * cost
//	local burst_offset = emission_interval * burst
//	local jan_1_2017 = 1483228800
//	local now = redis.call("TIME")
//	now = (now[1] - jan_1_2017) + (now[2] / 1000000)
//	local tat = redis.call("GET", rate_limit_key)
//	if not tat then tat = now else tat = tonumber(tat) end
//	tat = math.max(tat, now)
//	local new_tat = tat + increment
//	local allow_at = new_tat - burst_offset
//	local diff = now - allow_at
//	local remaining = diff / emission_interval
//	if remaining < 0 then
//	  local reset_after = tat - now
//	  local retry_after = diff * -1
//	  return {0, 0, tostring(retry_after), tostring(reset_after)}
//	end
//	local reset_after = new_tat - now
//	if reset_after > 0 then
//	  redis.call("SET", rate_limit_key, new_tat, "EX", math.ceil(reset_after))
//	end
//	local retry_after = -1
//	return {cost, remaining, tostring(retry_after), tostring(reset_after)}
//
// burst, rate and period stay strings that Lua's arithmetic converts
// (gopher-lua's own parse, not tonumber's): only plain decimals, which
// every parse reads alike, run natively.
func (h *scriptHost) gcra(tx *engine.ScriptTx) ([]byte, bool) {
	args := tx.Args()
	if tx.NumKeys() != 1 || len(args) != 5 {
		return nil, false
	}
	key := args[0]
	burst, ok1 := plainDecimal(args[1])
	rate, ok2 := plainDecimal(args[2])
	period, ok3 := plainDecimal(args[3])
	cost, ok4 := script.ToNumber(args[4])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, false
	}
	emission := period / rate
	increment := float64(emission * cost)
	burstOffset := float64(emission * burst)
	t := h.call(h.r.native.time, h.names.time)
	secs, ok := firstBulk(t)
	if !ok {
		return nil, false
	}
	sec, ok := plainDecimal(secs)
	if !ok {
		return nil, false
	}
	usecs, ok := secondBulk(t)
	if !ok {
		return nil, false
	}
	usec, ok := plainDecimal(usecs)
	if !ok {
		return nil, false
	}
	now := (sec - 1483228800) + usec/1000000
	rep := h.call(h.r.native.get, h.names.get, key)
	tat := now
	if !bytes.Equal(rep, []byte("$-1\r\n")) {
		v, ok := bulk(rep)
		if !ok {
			return nil, false
		}
		if tat, ok = script.ToNumber(v); !ok {
			return nil, false // math.max(nil, now): the Lua's error
		}
	}
	if now > tat {
		tat = now
	}
	newTat := tat + increment
	allowAt := newTat - burstOffset
	diff := now - allowAt
	remaining := diff / emission
	reply := make([]byte, 0, 64)
	if remaining < 0 {
		resetAfter := tat - now
		retryAfter := float64(diff * -1)
		reply = append(reply, "*4\r\n:0\r\n:0\r\n"...)
		reply = appendNumberBulk(reply, retryAfter)
		return appendNumberBulk(reply, resetAfter), true
	}
	resetAfter := newTat - now
	if resetAfter > 0 {
		h.valArg = script.FormatArg(h.valArg[:0], newTat)
		h.ttlArg = script.FormatArg(h.ttlArg[:0], math.Ceil(resetAfter))
		if !isOK(h.call(h.r.native.set, h.names.set, key, h.valArg, h.names.ex, h.ttlArg)) {
			return nil, false
		}
	}
	reply = append(reply, "*4\r\n:"...)
	reply = strconv.AppendInt(reply, script.ToInteger(cost), 10)
	reply = append(reply, "\r\n:"...)
	reply = strconv.AppendInt(reply, script.ToInteger(remaining), 10)
	reply = append(reply, "\r\n$2\r\n-1\r\n"...)
	return appendNumberBulk(reply, resetAfter), true
}

// plainDecimal reads an optional minus, digits without a leading zero
// (or one zero) and an optional fraction, at most 15 digits: the strings
// tonumber, gopher-lua's arithmetic and strconv read as the same number.
func plainDecimal(s []byte) (float64, bool) {
	i := 0
	if len(s) > 0 && s[0] == '-' {
		i = 1
	}
	start, dot, digits := i, -1, 0
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && dot < 0 && i > start:
			dot = i
		default:
			return 0, false
		}
	}
	if string(s) == "-0" { // arithmetic reads +0 (an integer), tonumber -0
		return 0, false
	}
	if digits == 0 || digits > 15 || dot == len(s)-1 || len(s)-start > 1 && s[start] == '0' && (dot != start+1) {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(s), 64)
	return f, err == nil
}

// appendNumberBulk appends tostring(f) as a bulk string.
func appendNumberBulk(b []byte, f float64) []byte {
	var num [32]byte
	n := script.ToString(num[:0], f)
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(n)), 10)
	b = append(b, '\r', '\n')
	b = append(b, n...)
	return append(b, '\r', '\n')
}

// call runs cmd, named by args[0], as redis.call does (RESP2, the
// scripts' protocol until redis.setresp).
func (h *scriptHost) call(cmd *command, args ...[]byte) []byte {
	h.argv = append(h.argv[:0], args...)
	return h.callCmd(cmd, h.argv, 2)
}

// getNumber is tonumber(redis.call("get", key)) or def; ok is false on an
// error reply (WRONGTYPE: the interpreter raises it).
func (h *scriptHost) getNumber(key []byte, def float64) (float64, bool) {
	rep := h.call(h.r.native.get, h.names.get, key)
	if bytes.Equal(rep, []byte("$-1\r\n")) {
		return def, true // false: tonumber(false) is nil
	}
	v, ok := bulk(rep)
	if !ok {
		return 0, false
	}
	if f, ok := script.ToNumber(v); ok {
		return f, true
	}
	return def, true
}

// replyHeader reads the "<t><n>\r\n" that starts a reply of type t and
// returns n and what follows it.
func replyHeader(rep []byte, t byte) (int64, []byte, bool) {
	if len(rep) < 4 || rep[0] != t {
		return 0, nil, false
	}
	i := bytes.Index(rep, []byte("\r\n"))
	if i < 0 {
		return 0, nil, false
	}
	n, ok := engine.ParseInt(rep[1:i])
	return n, rep[i+2:], ok
}

// bulk reads a whole reply that is one bulk string.
func bulk(rep []byte) ([]byte, bool) {
	n, rest, ok := replyHeader(rep, '$')
	if !ok || n < 0 || int64(len(rest)) != n+2 {
		return nil, false
	}
	return rest[:n], true
}

// firstBulk reads the first element of an array reply of bulk strings.
func firstBulk(rep []byte) ([]byte, bool) {
	v, ok := arrayBulk(rep, 0)
	return v, ok
}

// secondBulk reads the second element of an array reply of bulk strings.
func secondBulk(rep []byte) ([]byte, bool) {
	v, ok := arrayBulk(rep, 1)
	return v, ok
}

// arrayBulk reads element i of an array reply of bulk strings.
func arrayBulk(rep []byte, i int) ([]byte, bool) {
	n, rest, ok := replyHeader(rep, '*')
	if !ok || int64(i) >= n {
		return nil, false
	}
	for k := 0; ; k++ {
		m, body, ok := replyHeader(rest, '$')
		if !ok || m < 0 || int64(len(body)) < m+2 {
			return nil, false
		}
		if k == i {
			return body[:m], true
		}
		rest = body[m+2:]
	}
}

func isOK(rep []byte) bool { return bytes.Equal(rep, []byte("+OK\r\n")) }

// nativeCmds are the commands the native scripts call, looked up once
// in the runner's command table rather than by name on every call.
type nativeCmds struct{ get, setex, time, set *command }

func nativeCommands(srv *Server) nativeCmds {
	return nativeCmds{get: srv.lookup([]byte("get")), setex: srv.lookup([]byte("setex")),
		time: srv.lookup([]byte("time")), set: srv.lookup([]byte("set"))}
}

// nativeNames are the command names the native scripts call.
type nativeNames struct{ get, setex, time, set, ex []byte }
