-- GCRA, a settle block (lua.go): the Go mirror is algo.Settle's debit and
-- giveBack. state is "t f" (gcra.lua); a debit moves the theoretical
-- arrival time on by delta emission intervals (past full: a debt, at most
-- MAX_DEBT past now); a give-back moves it back, never before now.
local t, f = now, 0
local st, sf
if state then
  st, sf = match(state, '^(%d+) (%d+)$')
  if st then st, sf = tonumber(st), min(tonumber(sf), rate - 1) end
end
if delta > 0 then
  if st and st >= now then t, f = st, sf end
  local limit = now + MAX_DEBT
  if delta * period / rate > 1.5 * MAX_DEBT then
    t, f = limit, 0
  else
    local q, r
    if muldiv then
      q, r = muldiv(delta, period, rate)
    else
      q = floor(delta * period / rate)
      r = delta * period - q * rate
    end
    t, f = t + q, f + r
    if f >= rate then t, f = t + 1, f - rate end
    if t > limit then t, f = limit, 0 end
  end
  new_state = format('%d %d', t, f)
elseif st then
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
  if g > 0 and g * period / rate > 1.000001 * max(st - now, 0) then
    new_state = false -- back before now: idle (estimated first, as above)
  elseif g > 0 then
    local q, r
    if muldiv then
      q, r = muldiv(g, period, rate)
    else
      q = floor(g * period / rate)
      r = g * period - q * rate
    end
    t, f = st - q, sf - r
    if f < 0 then t, f = t - 1, f + rate end
    if t < now or (t == now and f == 0) then new_state = false else new_state = format('%d %d', t, f) end
  end
end
