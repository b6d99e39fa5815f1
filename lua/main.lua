-- tollgate main: follows the algorithm file that defined decide(c).

-- A decision re-sent after a lost reply (a client retry after a read timeout)
-- finds the nonce its first run stored and answers the same, debiting nothing
-- and using up no replay. Only admissions and replays are stored ("remaining
-- reset replayed"): a denial changed nothing, so judging it again is harmless.
if nonce_ttl > 0 then
  local saved = redis.call('GET', KEYS[4])
  if saved then
    local remaining, reset, replayed = string.match(saved, '^(%d+) (%d+) ?(%d*)$')
    return {1, tonumber(remaining), 0, tonumber(reset), tonumber(replayed) or 0}
  end
end

-- A request id admitted before replays without a debit, max_replays times;
-- then it is judged afresh. So one admission buys at most 1 + max_replays
-- calls carrying that id within replay_ttl.
if max_replays > 0 then
  local used = redis.call('GET', KEYS[3])
  if used and tonumber(used) < max_replays then
    redis.call('INCR', KEYS[3])
    local _, remaining, _, reset = decide(0)
    -- Else every re-sent copy of this one call would use up a replay, and a
    -- later attempt of the call would be debited again.
    if nonce_ttl > 0 then
      redis.call('SET', KEYS[4], string.format('%d %d 1', remaining, reset), 'PX', nonce_ttl)
    end
    return {1, remaining, 0, reset, 1}
  end
end

local allowed, remaining, retry, reset = decide(cost)
if allowed == 1 then
  -- The marker is (re)started only on admission, so a denied id leaves no
  -- trace. A plain SET is the "SET NX" of an absent marker and the reset of
  -- an exhausted one: nothing runs between the GET above and this write.
  if max_replays > 0 then
    redis.call('SET', KEYS[3], 0, 'PX', replay_ttl)
  end
  if nonce_ttl > 0 then
    redis.call('SET', KEYS[4], string.format('%d %d 0', remaining, reset), 'PX', nonce_ttl)
  end
end
return {allowed, remaining, retry, reset, 0}
