-- Sliding window. Windows are period-long, aligned to the server clock
-- (window number w = floor(now / period)). KEYS[1] holds even windows and
-- KEYS[2] odd ones, each a hash: w = window number, c = count admitted in it.
-- A slot whose w is not the current or previous window counts as empty, so a
-- late expiry never leaks a count into a later window.
--
-- The count over the last period is estimated as
--   previous * (period - elapsed) / period + current
-- and kept scaled by period, as the integer
--   used = previous * (period - elapsed) + current * period.
-- A request of cost c is admitted iff used + c * period <= rate * period.
--
-- decide(c): see token_bucket.lua.
local function decide(c)
  local w = floor(now / period)
  local elapsed = now - w * period
  local cur_key, prev_key = KEYS[1 + w % 2], KEYS[2 - w % 2]
  local cur = redis.call('HMGET', cur_key, 'w', 'c')
  local prev = redis.call('HMGET', prev_key, 'w', 'c')
  -- Counts above rate only exist after the limit was lowered; capping them
  -- keeps every product below 2^53.
  local cur_n, prev_n = 0, 0
  if tonumber(cur[1]) == w then cur_n = math.min(tonumber(cur[2]), rate) end
  if tonumber(prev[1]) == w - 1 then prev_n = math.min(tonumber(prev[2]), rate) end
  local used = prev_n * (period - elapsed) + cur_n * period

  local allowed, retry = 0, 0
  if used <= (rate - c) * period then
    allowed, cur_n, used = 1, cur_n + c, used + c * period
  elseif cur_n <= rate - c then
    -- Fits later in this window, as the previous window's weight decays
    -- (denied with cur_n <= rate - c implies prev_n > 0).
    retry = ceil((used - (rate - c) * period) / prev_n)
  else
    -- Only in the next window, once this window's count, now the previous
    -- one, has decayed to rate - c (at its very end if c = rate).
    retry = period - elapsed + ceil((cur_n - (rate - c)) * period / cur_n)
  end

  local reset = 0
  if cur_n > 0 then
    reset = 2 * period - elapsed
  elseif prev_n > 0 then
    reset = period - elapsed
  end
  if allowed == 1 and c > 0 then
    redis.call('HSET', cur_key, 'w', int(w), 'c', int(cur_n))
    redis.call('PEXPIRE', cur_key, ttl_ms(reset)) -- matters until the next window ends
  end
  local remaining = 0
  if used < rate * period then remaining = floor((rate * period - used) / period) end
  return allowed, remaining, retry, reset
end
