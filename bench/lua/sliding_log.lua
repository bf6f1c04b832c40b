-- Sliding window log in a sorted set: one member per admitted unit, scored
-- by its time in microseconds; the log holds the entries in
-- (now - window, now]. As in RL.LOG, a request of cost units is admitted
-- while logged + cost <= limit. Replies
-- {allowed, limit, remaining, retry_after_ms, reset_after_ms}.
-- KEYS[1]: the log. ARGV: limit, window (ms), cost.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2]) * 1000
local cost = tonumber(ARGV[3]) or 1
local t = redis.call('TIME')
local stamp = t[1] .. string.format('%06d', tonumber(t[2]))
local now = tonumber(stamp)
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now - window))
local n = redis.call('ZCARD', key)
local allowed, retry = 0, 0
if n + cost <= limit then
  allowed = 1
  for i = 1, cost do
    -- members are unique: the time, then the log's length after the entry
    redis.call('ZADD', key, stamp, stamp .. ':' .. (n + i))
  end
  n = n + cost
  if cost > 0 then redis.call('PEXPIRE', key, math.ceil(window / 1000)) end
elseif cost > limit then
  retry = -1
else
  local idx = n + cost - limit - 1
  local e = redis.call('ZRANGE', key, idx, idx, 'WITHSCORES')
  retry = math.max(1, math.ceil((tonumber(e[2]) + window - now) / 1000))
end
local reset = 0
if n > 0 then
  local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  reset = math.ceil((tonumber(e[2]) + window - now) / 1000)
end
return {allowed, limit, math.max(0, limit - n), retry, reset}
