-- tollgate main: follows the algorithm's block, which judged cost c.

-- One command writes the state and its TTL. PX counts from the server's
-- millisecond clock, which may lag the TIME reading by up to a millisecond,
-- hence the extra one: a key never vanishes while its state still matters,
-- and outlives it by at most 2ms. Absent state is an idle identity.
if new_state then
  call('SET', KEYS[1], new_state, 'PX', ceil(keep / 1000) + 1)
end

if replay then
  -- INCR keeps the marker's TTL, set when the id was admitted.
  call('INCR', KEYS[2])
  return {1, remaining, 0, reset, 1}
end

-- The marker is (re)started only on admission, so a denied id leaves no
-- trace. A plain SET is the "SET NX" of an absent marker and the reset of an
-- exhausted one: nothing runs between the read above and this write.
if allowed == 1 and max_replays then
  call('SET', KEYS[2], 0, 'PX', ARGV[6])
end
return {allowed, remaining, retry, reset, 0}
