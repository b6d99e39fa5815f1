-- reads: state (the key's string, false when absent), now, rate, period,
--        capacity, c (the cost, 0 to only read)
-- sets:  allowed (0|1), remaining, retry, reset (us); when it admits c > 0,
--        new_state and keep (us from now that the state matters)
--
-- GCRA, a judge block, with the meaning of rate, period and burst of
-- github.com/go-redis/redis_rate: one emission interval T = period / rate per
-- unit, up to capacity units at once. The state is the string "t f" holding
-- the theoretical arrival time (TAT) exactly: t = whole microseconds, f = the
-- fraction of a microsecond in units of 1/rate (0 <= f < rate). An absent or
-- unreadable state is an idle identity (TAT in the past).
--
-- Every duration is a mixed number like the TAT: whole microseconds and a
-- fraction in 1/rate units. The lead L = TAT - now is (ahead, frac); a
-- request of cost c adds c * period / rate and is admitted iff
-- L <= (capacity - c) * period / rate. So L never exceeds
-- full = capacity * period / rate, except after the clock stepped back or
-- the limit was lowered: then the whole microseconds beyond full are kept
-- apart, in over, as a wait that comes first. A limit whose products reach
-- 2^53 has them split by muldiv (arith.lua), so nothing is rounded whatever
-- the limit's size.
--
-- Differences from redis_rate, which computes in float seconds: it rounds
-- remaining with floor(x + 0.5), so it admits up to half an emission interval
-- early; this block is exact to the microsecond and admits only once the
-- whole interval has passed. And when it denies, redis_rate reports
-- remaining 0, while this reports the units still available (nonzero when a
-- cost above one was denied), as every tollgate algorithm does.
local fq, fr, cq, cr -- full, and what cost c adds
if muldiv then
  fq, fr = muldiv(capacity, period, rate)
  cq, cr = muldiv(c, period, rate)
else
  fq, cq = floor(capacity * period / rate), floor(c * period / rate)
  fr, cr = capacity * period - fq * rate, c * period - cq * rate
end
local lq, lr = fq - cq, fr - cr -- the most lead at which c still fits
if lr < 0 then lq, lr = lq - 1, lr + rate end
local ahead, frac = 0, 0 -- the lead: whole us, and 1/rate us
if state then
  local t, f = match(state, '^(%d+) (%d+)$')
  if t then
    ahead, frac = tonumber(t) - now, min(tonumber(f), rate - 1)
    if ahead < 0 then ahead, frac = 0, 0 end
  end
end
local over = 0
if ahead > fq then over, ahead = ahead - fq, fq end

if over == 0 and (ahead < lq or ahead == lq and frac <= lr) then
  allowed, ahead, frac = 1, ahead + cq, frac + cr
  if frac >= rate then ahead, frac = ahead + 1, frac - rate end
else
  retry = over + ahead - lq
  if frac > lr then retry = retry + 1 end
end
reset = over + ahead
if frac > 0 then reset = reset + 1 end
if allowed == 1 and c > 0 then
  new_state, keep = format('%d %d', now + ahead, frac), reset
end
-- remaining = floor((full - L) / T) = capacity - ceil(L * rate / period)
if over == 0 and (ahead < fq or ahead == fq and frac < fr) then
  local q, r
  if muldiv then
    q, r = muldiv(ahead, rate, period)
  else
    q = floor(ahead * rate / period)
    r = ahead * rate - q * period
  end
  remaining = capacity - q - ceil((r + frac) / period)
end
