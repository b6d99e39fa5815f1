-- reads: state, now, rate, period, with arith.lua's functions all defined
-- sets:  debt, the units owed past empty
--
-- Sliding window, a debt block: what the estimate counts past the
-- rate, as algo.Debt finds it.
local sw, sc, sp = match(state or '', '^(%d+) (%d+) (%d+)$')
local w = floor(now / period)
local cur, prev = 0, 0
if sw then
  sw = tonumber(sw)
  if sw == w then
    cur, prev = tonumber(sc), tonumber(sp)
  elseif sw == w - 1 then
    prev = tonumber(sc)
  end
end
cur, prev = min(cur, 2 * rate), min(prev, 2 * rate)
local share = 0
if prev > 0 then share = mulceil(prev, period - (now - w * period), period) end
debt = max(cur + share - rate, 0)
