-- GCRA, a debt block (lua.go): the units a lead past the capacity owes,
-- ceil(lead * rate / period) - capacity, as algo.Debt finds them.
local t, f = match(state or '', '^(%d+) (%d+)$')
if t and tonumber(t) > now then
  local q, r = muldiv(tonumber(t) - now, rate, period)
  local frac = r + min(tonumber(f), rate - 1)
  if frac > 0 then q = q + ceil(frac / period) end
  debt = max(q - capacity, 0)
end
