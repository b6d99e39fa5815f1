-- Token bucket refund: the whole tokens go back, at most to the capacity
-- (a full bucket is an absent key).
do
  local n, t = match(state, '^(%d+) (%d+)$')
  if n then
    n = tonumber(n) + c
    if n >= capacity then new_state = false else new_state = format('%d %s', n, t) end
  end
end
