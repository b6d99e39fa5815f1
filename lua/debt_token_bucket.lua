-- reads: state, now, rate, period, with arith.lua's functions all defined
-- sets:  debt, the units owed past empty
--
-- Token bucket, a debt block: the units state owes past empty at
-- now, as algo.Debt finds them. A bucket in debt keeps no token and credits
-- its refill from a time after now.
local n, t = match(state or '', '^(%d+) (%d+)$')
if n and tonumber(n) == 0 and tonumber(t) > now then
  debt = mulceil(tonumber(t) - now, rate, period)
end
