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
  -- The reply, compact (doc.go): a code that holds allowed, replayed and
  -- remaining, then the reset, then the retry only when denied (it is 0
  -- when admitted). Each integer of a reply costs Redis a conversion and
  -- the client a parse: a decision answers two, against five.
  if allowed < 0 then
    reply[nr + 1], nr = allowed, nr + 1
  elseif allowed == 1 then
    reply[nr + 1], reply[nr + 2], nr = remaining * 4 + 2 + (replay and 1 or 0), reset, nr + 2
  else
    reply[nr + 1], reply[nr + 2], reply[nr + 3], nr = remaining * 4, reset, retry, nr + 3
  end
end

reply[nr + 1] = now
return reply
