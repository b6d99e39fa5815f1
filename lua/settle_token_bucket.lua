-- Token bucket, a settle block (lua.go): the Go mirror is algo.Settle's
-- debit and giveBack. state is "n t" (token_bucket.lua); delta > 0 debits
-- delta units past empty, delta < 0 gives back -delta units of the debit
-- made at debited_at that left adm_remaining. Past empty, no token is kept:
-- refill is credited from t, after now, once the debt is paid.
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
  -- Giving back g units: no more than the bucket could not have lost to
  -- its capacity since the debit (algo's givable).
  local g = -delta
  local e = max(now - debited_at, 0)
  if e == 0 then
    g = min(g, max(capacity - adm_remaining, 0)) -- no refill since: nothing lost
  elseif e >= (mulceil and mulceil(capacity, period, rate) or ceil(capacity * period / rate)) then
    g = 0
  else
    local u = mulceil and mulceil(e, rate, period) or ceil(e * rate / period)
    g = min(g, max(capacity - adm_remaining - u - 1, 0))
  end
  if g > 0 then
    local full = mulceil and mulceil(capacity, period, rate) or ceil(capacity * period / rate)
    if ts > now and g * period / rate > 1.000001 * (ts - now + full) then
      -- Far more than the debt and a full refill: a full bucket (estimated
      -- first, so that no exact product is formed out of range).
      new_state = false
    elseif ts > now then
      -- In debt: the debt shrinks by the time g units take, rounded down.
      new_state = format('%d %d', tokens, ts - (mulfloor and mulfloor(g, period, rate) or floor(g * period / rate)))
    elseif tokens + g < capacity then
      new_state = format('%d %d', tokens + g, ts)
    else
      new_state = false
    end
  end
end
