-- Sliding window counter over two keys: the counts of the current and the
-- previous window (aligned to the Unix epoch), weighted as
-- est = cur + prev * (window - elapsed) / window, as in RL.SLIDING. Replies
-- {allowed, limit, remaining, retry_after_ms, reset_after_ms}.
-- KEYS[1]: the limiter. ARGV: limit, window (ms), cost.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3]) or 1
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ws = now - now % window
local cur_key = KEYS[1] .. ':' .. string.format('%.0f', ws)
local prev_key = KEYS[1] .. ':' .. string.format('%.0f', ws - window)
local v = redis.call('MGET', cur_key, prev_key)
local cur = tonumber(v[1]) or 0
local prev = tonumber(v[2]) or 0
local elapsed = now - ws
local est = math.floor(cur + prev * (window - elapsed) / window)
local allowed, retry = 0, 0
if est + cost <= limit then
  allowed = 1
  if cost > 0 then
    cur = redis.call('INCRBY', cur_key, cost)
    if cur == cost then
      redis.call('PEXPIRE', cur_key, ws + 2 * window - now)
    end
    est = est + cost
  end
elseif cost > limit then
  retry = -1
elseif cur + cost <= limit then
  -- in this window, once prev's weight has fallen far enough
  local e = window - (limit - cost + 1 - cur) * window / prev
  retry = math.max(1, math.ceil(e - elapsed))
else
  -- in the next window, where this window's count is the previous one
  local e = window - (limit - cost + 1) * window / cur
  retry = math.max(1, math.ceil(ws + window + math.max(0, e) - now))
end
local reset = 0
if cur > 0 then
  reset = ws + 2 * window - now
elseif prev > 0 then
  reset = ws + window - now
end
return {allowed, limit, math.max(0, limit - est), retry, reset}
