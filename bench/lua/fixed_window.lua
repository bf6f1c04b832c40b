-- Fixed window counter, the INCR + EXPIRE design: one counter per window,
-- named by the window's start (windows aligned to the Unix epoch), created
-- by the first INCRBY of the window and expiring at its end. A denied
-- request is not counted (GET first), as in RL.FIXED. Replies
-- {allowed, limit, remaining, retry_after_ms, reset_after_ms}.
-- KEYS[1]: the limiter. ARGV: limit, window (ms), cost.
-- (The counter's name is derived from KEYS[1], which is fine on a single
-- Redis; a Redis Cluster would need a hash tag.)
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3]) or 1
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ws = now - now % window
local key = KEYS[1] .. ':' .. string.format('%.0f', ws)
local count = tonumber(redis.call('GET', key)) or 0
local allowed, retry = 0, 0
if count + cost <= limit then
  allowed = 1
  if cost > 0 then
    count = redis.call('INCRBY', key, cost)
    if count == cost then
      redis.call('PEXPIRE', key, ws + window - now)
    end
  end
elseif cost > limit then
  retry = -1
else
  retry = ws + window - now
end
local reset = 0
if count > 0 then reset = ws + window - now end
return {allowed, limit, math.max(0, limit - count), retry, reset}
