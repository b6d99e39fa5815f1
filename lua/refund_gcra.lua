-- GCRA refund, a give-back block (lua.go): the theoretical arrival time moves
-- back by c emission intervals less the forfeit, kept exact as whole
-- microseconds and 1/rate fractions (c * period / rate split by muldiv at
-- every size), never before now (a TAT in the past is an idle identity, an
-- absent key).
local t, f = match(state, '^(%d+) (%d+)$')
local cq, cr -- c * period / rate: whole us and 1/rate us
if muldiv then
  cq, cr = muldiv(c, period, rate)
else
  cq = floor(c * period / rate)
  cr = c * period - cq * rate
end
local whole = cq - forfeit -- the move back is whole + cr / rate us
if t and (whole > 0 or whole == 0 and cr > 0) then
  t, f = tonumber(t) - whole, min(tonumber(f), rate - 1) - cr
  if f < 0 then t, f = t - 1, f + rate end
  if t < now or (t == now and f == 0) then new_state = false else new_state = format('%d %d', t, f) end
end
