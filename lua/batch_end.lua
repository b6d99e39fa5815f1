-- tollgate batch end: follows the algorithm blocks, still inside the loop
-- over the decisions: this decision's writes, then its reply.
  if alg == -1 then
    allowed = -1
  elseif replay then
    -- INCR keeps the marker's TTL, set when the id was admitted.
    local v = pcall_('INCR', marker)
    if type(v) == 'table' then
      allowed = -2
    else
      allowed, retry, written[marker] = 1, 0, v
    end
  elseif allowed == 1 and not peek then
    -- As in the decide script: one SET ... PX per key, the state first, so
    -- that a marker never stands for a debit that was not made. Once the
    -- state is written the decision is admitted, whatever its marker's fate.
    local v = pcall_('SET', key, new_state, 'PX', ceil(keep / 1000) + 1)
    if type(v) == 'table' and v.err then
      allowed = -2
    else
      written[key] = new_state
      if with_id then
        v = pcall_('SET', marker, '0', 'PX', ttl) -- strings: see batch.lua
        if not (type(v) == 'table' and v.err) then written[marker] = 0 end
      end
    end
  end
  local r = 5 * (d - 1)
  if allowed < 0 then
    reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] = allowed, 0, 0, 0, 0
  else
    reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = allowed, remaining, retry, reset
    reply[r + 5] = replay and 1 or 0
  end
end

reply[5 * n + 1] = now
return reply
