-- reads: state, now, rate, period, with arith.lua's functions all defined
-- sets:  debt, the units owed past empty
--
-- Fixed window, a debt block: what the current window counted
-- past the rate, as algo.Debt finds it.
local kind = period > 0 and 0 or -period
local w
if kind == 0 then w = floor(now / period) else w = calendar(now, kind) end
local sw, sc, sk
if kind == 0 then
  sw, sc = match(state or '', '^(%d+) (%d+)$')
  sk = 0
else
  sw, sc, sk = match(state or '', '^(%d+) (%d+) (%d+)$')
  sk = tonumber(sk)
end
if sw and tonumber(sw) == w and sk == kind then debt = max(tonumber(sc) - rate, 0) end
