-- Token bucket in a hash, as the anchor script does it (HMGET, HSET, an
-- expiry, the server's clock from TIME), extended to reply what RL.TOKEN
-- replies: {allowed, capacity, remaining, retry_after_ms, reset_after_ms}.
-- KEYS[1]: the bucket. ARGV: capacity, rate (tokens per second), cost.
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3]) or 1
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local st = redis.call('HMGET', key, 'tokens', 'last')
local tokens = tonumber(st[1])
local last = tonumber(st[2])
if tokens == nil then tokens = capacity; last = now end
tokens = math.min(capacity, tokens + math.max(0, now - last) * rate)
local allowed, retry = 0, 0
if tokens >= cost then
  allowed = 1
  tokens = tokens - cost
elseif cost > capacity then
  retry = -1
else
  retry = math.max(1, math.ceil((cost - tokens) / rate * 1000))
end
local reset = math.ceil((capacity - tokens) / rate * 1000)
if allowed == 1 and cost > 0 then
  redis.call('HSET', key, 'tokens', tokens, 'last', now)
  redis.call('PEXPIRE', key, math.max(1, reset))
end
return {allowed, capacity, math.floor(tokens), retry, reset}
