-- Fixed window refund: c comes off the count if the window the debit was
-- made in is still the stored one, never below 0.
do
  local w, count = match(state, '^(%d+) (%d+)$')
  if w and tonumber(w) == floor(debited_at / period) then
    new_state = format('%d %d', w, max(tonumber(count) - c, 0))
  end
end
