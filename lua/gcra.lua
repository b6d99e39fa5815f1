-- GCRA, with the meaning of rate, period and burst of
-- github.com/go-redis/redis_rate: one emission interval T = period / rate per
-- unit, up to capacity units at once. KEYS[1] is the string "t f" holding the
-- theoretical arrival time (TAT) exactly: t = whole microseconds, f = the
-- fraction of a microsecond in units of 1/rate (0 <= f < rate). An absent key
-- is an idle identity (TAT in the past).
--
-- All arithmetic is on the backlog D = (TAT - now) * rate, in units of
-- 1/rate us: a request of cost c adds c * period, and it is admitted iff
-- D + c * period <= capacity * period. So D never exceeds capacity * period,
-- except after the clock stepped back or the limit was lowered: then the
-- whole microseconds of TAT beyond a full backlog are kept apart, in over,
-- as a wait that comes first, so that no product leaves the exact range.
--
-- Differences from redis_rate, which computes in float seconds: it rounds
-- remaining with floor(x + 0.5), so it admits up to half an emission interval
-- early; this script is exact to the microsecond and admits only once the
-- whole interval has passed. And when it denies, redis_rate reports
-- remaining 0, while this reports the units still available (nonzero when a
-- cost above one was denied), as every tollgate algorithm does.
do
  local full = capacity * period
  local ahead, frac = 0, 0 -- TAT - now: whole us, and 1/rate us
  if state then
    local t, f = match(state, '^(%d+) (%d+)$')
    ahead, frac = tonumber(t) - now, min(tonumber(f), rate - 1)
    if ahead < 0 then ahead, frac = 0, 0 end
  end
  local over, most = 0, floor(full / rate)
  if ahead > most then over, ahead = ahead - most, most end
  local backlog = ahead * rate + frac -- at most full + rate - 1

  if over == 0 and backlog <= (capacity - c) * period then
    allowed, backlog = 1, backlog + c * period
  else
    retry = over + ceil((backlog - (capacity - c) * period) / rate)
  end
  reset = over + ceil(backlog / rate)
  if allowed == 1 and c > 0 then
    new_state, keep = format('%d %d', now + floor(backlog / rate), backlog % rate), reset
  end
  if over == 0 and backlog < full then remaining = floor((full - backlog) / period) end
end
