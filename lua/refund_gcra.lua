-- GCRA refund: the theoretical arrival time moves back by c emission
-- intervals less the forfeit, kept exact as whole microseconds and 1/rate
-- fractions, never before now (a TAT in the past is an idle identity, an
-- absent key).
do
  local t, f = match(state, '^(%d+) (%d+)$')
  local back = c * period - forfeit * rate -- 1/rate us
  if t and back > 0 then
    local whole = floor(back / rate)
    t, f = tonumber(t) - whole, min(tonumber(f), rate - 1) - (back - whole * rate)
    if f < 0 then t, f = t - 1, f + rate end
    if t < now or (t == now and f == 0) then new_state = false else new_state = format('%d %d', t, f) end
  end
end
