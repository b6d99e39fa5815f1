-- tollgate main: follows the algorithm's block, which judged cost c.

-- One command writes the state and its TTL. PX counts from the server's
-- millisecond clock, which may lag the TIME reading by up to a millisecond,
-- hence the extra one: a key never vanishes while its state still matters,
-- and outlives it by at most 2ms. Absent state is an idle identity.
if new_state then
  call('SET', KEYS[1], new_state, 'PX', ceil(keep / 1000) + 1)
end

if replay then
  call('INCR', KEYS[3])
  -- Else every re-sent copy of this one call would use up a replay, and a
  -- later attempt of the call would be debited again.
  if nonce_ttl > 0 then
    call('SET', KEYS[4], format('%d %d 1', remaining, reset), 'PX', nonce_ttl)
  end
  return {1, remaining, 0, reset, 1}
end

if allowed == 1 then
  -- The marker is (re)started only on admission, so a denied id leaves no
  -- trace. A plain SET is the "SET NX" of an absent marker and the reset of
  -- an exhausted one: nothing runs between the read above and this write.
  if max_replays > 0 then
    call('SET', KEYS[3], 0, 'PX', replay_ttl)
  end
  if nonce_ttl > 0 then
    call('SET', KEYS[4], format('%d %d 0', remaining, reset), 'PX', nonce_ttl)
  end
end
return {allowed, remaining, retry, reset, 0}
