-- reads: state, now, rate, period, capacity, with arith.lua's functions all defined
-- sets:  debt, the units owed past empty
--
-- GCRA, a debt block: the units a lead past the capacity owes,
-- ceil(lead * rate / period) - capacity, as algo.Debt finds them.
local t, f = match(state or '', '^(%d+) (%d+)$')
if t and tonumber(t) > now then
  local q, r = muldiv(tonumber(t) - now, rate, period)
  local frac = r + min(tonumber(f), rate - 1)
  if frac > 0 then q = q + ceil(frac / period) end
  debt = max(q - capacity, 0)
end
