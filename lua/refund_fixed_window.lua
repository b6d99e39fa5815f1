-- Fixed window refund, a give-back block (lua.go): c comes off the count if
-- the window the debit was made in is still the stored one, never below 0. A
-- calendar window's state ("w c k") is that window when its kind and number
-- are those of the debit's instant (arith.lua's calendar).
if period > 0 then
  local w, count = match(state, '^(%d+) (%d+)$')
  if w and tonumber(w) == floor(debited_at / period) then
    new_state = format('%d %d', w, max(tonumber(count) - c, 0))
  end
else
  local w, count, k = match(state, '^(%d+) (%d+) (%d+)$')
  if w and tonumber(k) == -period and tonumber(w) == calendar(debited_at, -period) then
    new_state = format('%d %d %d', w, max(tonumber(count) - c, 0), k)
  end
end
