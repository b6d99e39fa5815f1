-- Sliding window refund, a give-back block (lua.go): c comes off the count of
-- the window the debit was made in, whichever of the two stored counts holds
-- it now, never below 0. A window no longer stored has nothing to give back.
local w, cur, prev = match(state, '^(%d+) (%d+) (%d+)$')
if w then
  local debited = floor(debited_at / period)
  w, cur, prev = tonumber(w), tonumber(cur), tonumber(prev)
  if w == debited then
    new_state = format('%d %d %d', w, max(cur - c, 0), prev)
  elseif w == debited + 1 then
    new_state = format('%d %d %d', w, cur, max(prev - c, 0))
  end
end
