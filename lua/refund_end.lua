  end
  if new_state ~= nil then work[key] = new_state end
end

-- A window's count keeps its expiry (KEEPTTL): the window ends when it ends.
-- A bucket's state matters less long after a refund than the debit's TTL
-- says, by at most the refunded cost's refill time.
for i = 1, groups do
  local key = KEYS[i]
  local s = work[key]
  if s then
    call('SET', key, s, 'KEEPTTL')
  elseif s == false then
    call('DEL', key)
  end
  work[key] = nil
end
-- The set was denied: its request id must leave no trace.
if markers then call('DEL', unpack(KEYS, groups + 1, 2 * groups)) end
return 1
