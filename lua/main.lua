  -- tollgate main: follows the algorithm blocks, still inside the loop.
  if new_state then
    if work then work[key], keep_for[key] = new_state, keep else only_state, only_keep = new_state, keep end
  end
  if replay then
    allowed, retry = 1, 0
  elseif allowed == 0 then
    all = false
  end
  local r = 5 * (i - 1)
  reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = allowed, remaining, retry, reset
  reply[r + 5] = replay and 1 or 0
end

if replay then
  -- INCR keeps a marker's TTL, set when the id was admitted. Groups on one
  -- state key share its marker, counted once.
  local seen = {}
  for i = groups + 1, 2 * groups do
    if not seen[KEYS[i]] then
      seen[KEYS[i]] = true
      call('INCR', KEYS[i])
    end
  end
elseif not all then
  -- All or nothing: a group that would have been admitted is denied too,
  -- with no wait of its own.
  for r = 1, 5 * groups, 5 do reply[r] = 0 end
elseif not peek then
  -- One command writes each state and its TTL. PX counts from the server's
  -- millisecond clock, which may lag the TIME reading by up to a
  -- millisecond, hence the extra one: a key never vanishes while its state
  -- still matters, and outlives it by at most 2ms. Absent state is an idle
  -- identity.
  if only_state then call('SET', KEYS[1], only_state, 'PX', ceil(only_keep / 1000) + 1) end
  for i = 1, work and groups or 0 do
    local key = KEYS[i]
    local s = work[key]
    if s then
      call('SET', key, s, 'PX', ceil(keep_for[key] / 1000) + 1)
      work[key] = nil
    end
  end
  -- The marker is (re)started only on admission, so a denied id leaves no
  -- trace. A plain SET is the "SET NX" of an absent marker and the reset of
  -- an exhausted one: nothing runs between the read above and this write.
  if with_id then
    for i = groups + 1, 2 * groups do
      call('SET', KEYS[i], '0', 'PX', ARGV[2])
    end
  end
end

-- The server time of the decision comes last: a refund of this call's
-- debits needs it.
reply[5 * groups + 1] = now
return reply
