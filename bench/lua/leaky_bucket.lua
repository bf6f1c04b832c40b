-- Leaky bucket (meter) in a hash: the level drains at rate units per second
-- and a request of cost units fits while level + cost <= capacity. Replies
-- what RL.LEAKY replies: {allowed, capacity, remaining, retry_after_ms,
-- reset_after_ms}.
-- KEYS[1]: the bucket. ARGV: capacity, rate (units per second), cost.
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3]) or 1
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local st = redis.call('HMGET', key, 'level', 'last')
local level = tonumber(st[1]) or 0
local last = tonumber(st[2]) or now
level = math.max(0, level - math.max(0, now - last) * rate)
local allowed, retry = 0, 0
if level + cost <= capacity then
  allowed = 1
  level = level + cost
elseif cost > capacity then
  retry = -1
else
  retry = math.max(1, math.ceil((level + cost - capacity) / rate * 1000))
end
local reset = math.ceil(level / rate * 1000)
if allowed == 1 and cost > 0 then
  redis.call('HSET', key, 'level', level, 'last', now)
  redis.call('PEXPIRE', key, math.max(1, reset))
end
return {allowed, capacity, math.floor(capacity - level), retry, reset}
