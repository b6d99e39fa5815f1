-- GCRA, with the meaning of rate, period and burst of
-- github.com/go-redis/redis_rate: one emission interval T = period / rate per
-- unit, up to capacity units at once. KEYS[1] is a hash holding the
-- theoretical arrival time (TAT) exactly: t = whole microseconds, f = the
-- fraction of a microsecond in units of 1/rate (0 <= f < rate). An absent key
-- is an idle identity (TAT in the past).
--
-- All arithmetic is on the backlog D = (TAT - now) * rate, in units of
-- 1/rate us: a request of cost c adds c * period, and it is admitted iff
-- D + c * period <= capacity * period. D never exceeds capacity * period.
--
-- Differences from redis_rate, which computes in float seconds: it rounds
-- remaining with floor(x + 0.5), so it admits up to half an emission interval
-- early; this script is exact to the microsecond and admits only once the
-- whole interval has passed. And when it denies, redis_rate reports
-- remaining 0, while this reports the units still available (nonzero when a
-- cost above one was denied), as every tollgate algorithm does.
--
-- decide(c): see token_bucket.lua.
local function decide(c)
  local s = redis.call('HMGET', KEYS[1], 't', 'f')
  local full = capacity * period
  local backlog = 0
  if s[1] then
    local ahead = tonumber(s[1]) - now
    if ahead > floor(full / rate) then
      backlog = full -- only after the limit was lowered: an empty bucket
    elseif ahead >= 0 then
      backlog = ahead * rate + tonumber(s[2])
      if backlog > full then backlog = full end
    end
  end

  local allowed, retry = 0, 0
  if backlog <= (capacity - c) * period then
    allowed, backlog = 1, backlog + c * period
  else
    retry = ceil((backlog - (capacity - c) * period) / rate)
  end
  local reset = ceil(backlog / rate)
  if allowed == 1 and c > 0 then
    redis.call('HSET', KEYS[1], 't', int(now + floor(backlog / rate)), 'f', int(backlog % rate))
    redis.call('PEXPIRE', KEYS[1], ttl_ms(reset)) -- absent means idle
  end
  return allowed, floor((full - backlog) / period), retry, reset
end
