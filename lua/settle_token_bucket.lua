-- reads: state, now, delta, debited_at, adm_reset, rate, period, capacity,
--        MAX_DEBT
-- sets:  new_state (a string; false deletes the key; nil leaves it)
--
-- Token bucket, a settle block: the Go mirror is algo.Settle's
-- debit and giveBack. state is "n t" (token_bucket.lua); delta > 0 debits
-- delta units past empty, delta < 0 gives back -delta units of the debit
-- made at debited_at that left the bucket adm_reset us from full. Past
-- empty, no token is kept: refill is credited from t, after now, once the
-- debt is paid.
local tokens, ts = capacity, now
if state then
  local n, t = match(state, '^(%d+) (%d+)$')
  if n then tokens, ts = tonumber(n), tonumber(t) end
end
if delta > 0 then
  -- The level and credited time at now, as the judge block finds them.
  local level, credited = capacity, now
  local elapsed = now - ts
  if elapsed < 0 then elapsed = 0 end
  if tokens < capacity and elapsed < (mulceil and mulceil(capacity - tokens, period, rate)
      or ceil((capacity - tokens) * period / rate)) then
    local earned = mulfloor and mulfloor(elapsed, rate, period) or floor(elapsed * rate / period)
    level = tokens + earned
    credited = ts + (mulceil and mulceil(earned, period, rate) or ceil(earned * period / rate))
  end
  if delta <= level then
    new_state = format('%d %d', level - delta, credited)
  else
    -- The refill the rest takes, at most MAX_DEBT: estimated first, so
    -- that an exact product is formed only when its quotient is in range.
    local owed, units = MAX_DEBT, delta - level
    if units * period / rate <= 1.5 * MAX_DEBT then
      owed = min(mulceil and mulceil(units, period, rate) or ceil(units * period / rate), MAX_DEBT)
    end
    new_state = format('%d %d', 0, min(credited + owed, now + MAX_DEBT))
  end
elseif state then
  -- Giving back g units, or h us of refill when they take longer: h, the
  -- time the admission left the bucket from full less the time since, is
  -- how long it cannot have lost refill to its capacity (algo's headroom).
  -- In debt, the debt shrinks by the time g units take, rounded down.
  -- (Estimated in doubles first, so that no exact product is formed out
  -- of range.)
  local g = -delta
  local h = adm_reset - max(now - debited_at, 0)
  if h > 0 then
    local n2, t2 = tokens, ts
    if g * period / rate > 1.000001 * h then
      t2 = ts - h
    elseif ts > now then
      t2 = ts - min(mulfloor and mulfloor(g, period, rate) or floor(g * period / rate), h)
    elseif (mulceil and mulceil(g, period, rate) or ceil(g * period / rate)) <= h then
      n2 = tokens + g
    else
      t2 = ts - h
    end
    if n2 >= capacity or (t2 <= now and now - t2 >= (mulceil and mulceil(capacity - n2, period, rate)
        or ceil((capacity - n2) * period / rate))) then
      new_state = false -- full
    else
      new_state = format('%d %d', n2, t2)
    end
  end
end
