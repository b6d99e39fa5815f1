-- reads: state (the key's string, false when absent), now, rate, period,
--        capacity, c (the cost, 0 to only read)
-- sets:  allowed (0|1), remaining, retry, reset (us); when it admits c > 0,
--        new_state and keep (us from now that the state matters)
--
-- Token bucket, a judge block. The state is the string "n t":
-- n = whole tokens, t = the microsecond up to which refill has been
-- credited. An absent or unreadable state is a full bucket.
--
-- Refill credits whole tokens only and moves t forward by the time those
-- tokens took (rounded up to the microsecond), not to now: the fraction of a
-- token already earned is kept, and rounding loses under 1us per write.
-- Durations are computed from the state as it is stored after the call, so
-- that a later call, which starts from that same state, agrees with them to
-- the microsecond. A limit whose products reach 2^53 has them computed by
-- mulfloor and mulceil (arith.lua): exact whatever the limit's size.
local tokens, ts = capacity, now -- the stored state
if state then
  local n, t = match(state, '^(%d+) (%d+)$')
  if n then tokens, ts = tonumber(n), tonumber(t) end
end

-- level tokens are available now, credited up to the microsecond credited.
local level, credited = capacity, now
local elapsed = now - ts
if elapsed < 0 then elapsed = 0 end -- a clock that stepped back refills nothing
if tokens < capacity and elapsed < (mulceil and mulceil(capacity - tokens, period, rate)
    or ceil((capacity - tokens) * period / rate)) then
  -- elapsed is shorter than the time to full, so earned < capacity.
  local earned = mulfloor and mulfloor(elapsed, rate, period) or floor(elapsed * rate / period)
  level = tokens + earned
  credited = ts + (mulceil and mulceil(earned, period, rate) or ceil(earned * period / rate))
end

if c <= level then
  allowed, level = 1, level - c
  if c > 0 then tokens, ts = level, credited end
else
  retry = ts + (mulceil and mulceil(c - tokens, period, rate) or ceil((c - tokens) * period / rate)) - now
end
if level < capacity then
  reset = ts + (mulceil and mulceil(capacity - tokens, period, rate)
    or ceil((capacity - tokens) * period / rate)) - now
end
if allowed == 1 and c > 0 then
  new_state, keep = format('%d %d', tokens, ts), reset
end
remaining = level
