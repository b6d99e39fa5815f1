-- reads: alg, now, period, reset (us until the state is full again), and
--        arith.lua's calendar for a calendar window
-- sets:  keep_after (us from now that a settled state matters)
--
-- Keep after a settlement, a block: a state matters until it is full again,
-- and a fixed window's until its window ends, whatever it holds.
keep_after = reset
if alg == 3 then
  if period > 0 then
    keep_after = (floor(now / period) + 1) * period - now
  else
    local _, next_start = calendar(now, -period)
    keep_after = next_start - now
  end
end
