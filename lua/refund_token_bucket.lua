-- Token bucket refund, a give-back block (lua.go): c whole tokens go back, at
-- most to the capacity (a full bucket is an absent key); a forfeit delays the
-- refill credited from t by as long, so that the bucket earns nothing for
-- those microseconds. A forfeit as long as c tokens take
-- (forfeit * rate >= c * period) leaves nothing to give back.
local n, t = match(state, '^(%d+) (%d+)$')
if n and forfeit < (mulceil and mulceil(c, period, rate) or ceil(c * period / rate)) then
  n = tonumber(n) + c
  if n >= capacity then
    new_state = false
  else
    new_state = format('%d %d', n, tonumber(t) + forfeit)
  end
end
