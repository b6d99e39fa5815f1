-- reads: state, now, delta, debited_at, adm_reset, rate, period, MAX_DEBT
-- sets:  new_state (a string; false deletes the key; nil leaves it)
--
-- GCRA, a settle block: the Go mirror is algo.Settle's debit and
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
  -- Giving back g units of lead, or h us when they take longer (h as in
  -- settle_token_bucket.lua); never before now.
  local g = -delta
  local h = adm_reset - max(now - debited_at, 0)
  if h > 0 then
    t, f = st - h, sf
    if g * period / rate <= 1.000001 * h then
      local q, r
      if muldiv then
        q, r = muldiv(g, period, rate)
      else
        q = floor(g * period / rate)
        r = g * period - q * rate
      end
      if q < h or (q == h and r == 0) then
        t, f = st - q, sf - r
        if f < 0 then t, f = t - 1, f + rate end
      end
    end
    if t < now or (t == now and f == 0) then new_state = false else new_state = format('%d %d', t, f) end
  end
end
