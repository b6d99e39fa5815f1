-- Fixed window. Windows are period-long, aligned to the server clock
-- (window number w = floor(now / period)). KEYS[1] is a hash: w = window
-- number, c = count admitted in it. A count stored for another window is
-- ignored, so a late expiry never counts into the next window.
--
-- decide(c): see token_bucket.lua.
local function decide(c)
  local w = floor(now / period)
  local left = (w + 1) * period - now -- microseconds until the next window
  local s = redis.call('HMGET', KEYS[1], 'w', 'c')
  local count = 0
  if tonumber(s[1]) == w then count = tonumber(s[2]) end

  local allowed, retry = 0, 0
  if count + c <= rate then
    allowed, count = 1, count + c
  else
    retry = left -- c <= rate always fits an empty window
  end
  local reset = 0
  if count > 0 then reset = left end
  if allowed == 1 and c > 0 then
    redis.call('HSET', KEYS[1], 'w', int(w), 'c', int(count))
    redis.call('PEXPIRE', KEYS[1], ttl_ms(left))
  end
  return allowed, math.max(rate - count, 0), retry, reset
end
