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
// false) turns it off; TestNativeScriptsMatchInterpreter compares both.

// springSHA is the SHA1 of Spring Cloud Gateway's request_rate_limiter.lua
// (resp/testdata/scripts/spring_request_rate_limiter.lua).
const springSHA = "0ad5736ed1c04aae6ec194376c784b89b8c08a7a"

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
		secs, ok := firstBulk(h.call(h.names.time))
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
		if !isOK(h.call(h.names.setex, tokensKey, h.ttlArg, h.valArg)) || !isOK(h.call(h.names.setex, tsKey, h.ttlArg, h.nowArg)) {
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

// call runs a command as redis.call does (RESP2, the scripts' protocol
// until redis.setresp).
func (h *scriptHost) call(args ...[]byte) []byte {
	h.argv = append(h.argv[:0], args...)
	return h.Call(h.argv, 2)
}

// getNumber is tonumber(redis.call("get", key)) or def; ok is false on an
// error reply (WRONGTYPE: the interpreter raises it).
func (h *scriptHost) getNumber(key []byte, def float64) (float64, bool) {
	rep := h.call(h.names.get, key)
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

// bulk reads a whole reply that is one bulk string.
func bulk(rep []byte) ([]byte, bool) {
	if len(rep) < 4 || rep[0] != '$' {
		return nil, false
	}
	i := bytes.Index(rep, []byte("\r\n"))
	if i < 0 {
		return nil, false
	}
	n, ok := engine.ParseInt(rep[1:i])
	if !ok || n < 0 || int64(len(rep)) != int64(i)+2+n+2 {
		return nil, false
	}
	return rep[i+2 : i+2+int(n)], true
}

// firstBulk reads the first element of an array reply of bulk strings.
func firstBulk(rep []byte) ([]byte, bool) {
	if len(rep) < 4 || rep[0] != '*' {
		return nil, false
	}
	i := bytes.Index(rep, []byte("\r\n"))
	if i < 0 {
		return nil, false
	}
	rest := rep[i+2:]
	if len(rest) < 4 || rest[0] != '$' {
		return nil, false
	}
	j := bytes.Index(rest, []byte("\r\n"))
	if j < 0 {
		return nil, false
	}
	n, ok := engine.ParseInt(rest[1:j])
	if !ok || n < 0 || int64(len(rest)) < int64(j)+2+n+2 {
		return nil, false
	}
	return rest[j+2 : j+2+int(n)], true
}

func isOK(rep []byte) bool { return bytes.Equal(rep, []byte("+OK\r\n")) }

// nativeNames are the command names the native scripts call.
type nativeNames struct{ get, setex, time []byte }

// nativeRuns is the number of scripts the runner's node ran natively.
func (r *ScriptRunner) nativeRuns() int64 {
	s := r.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, st := range s.by {
		n += st.native
	}
	return n
}
