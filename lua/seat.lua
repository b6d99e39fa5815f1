-- tollgate seat: in-flight seats of one identity, a sorted set of the ids
-- holding one, each scored by when it expires (us, the server's clock).
-- Expired seats are dropped first, so a caller that died frees its seat by
-- itself. Beside it, the recent mean time the identity's seats were held,
-- as their callers reported it on release. One call carries one or more
-- operations, each on its identity's two keys, run in order at one server
-- time: the store folds concurrent seat calls into one script call, as the
-- batch script folds decisions. The calling convention is in doc.go.
local call = redis.call
-- ARGV[1] is the era the call is stamped with (doc.go, Lineage): seats
-- have no lineage, but a seat call waits, as a decision does, for its
-- primary to be verified.
local hold_ttl = ARGV[2]

local time = call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

-- The key lives as long as its last seat: set after every change.
local function expire(key)
  local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then call('PEXPIRE', key, math.ceil((tonumber(last[2]) - now) / 1000) + 1) end
end

-- seat runs one operation and returns its reply.
local function seat(key, holdkey, op, limit, id, ttl)
  if op == 'count' then
    return {call('ZCOUNT', key, '(' .. now, '+inf'), now}
  end
  call('ZREMRANGEBYSCORE', key, '-inf', now)
  if op == 'hold' then
    -- A seat restored on a primary that lacks it: held until ttl, an
    -- instant on the server's clock, whatever the limit.
    if ttl > now then
      call('ZADD', key, ttl, id)
      expire(key)
    end
    return {1, now}
  end
  if op == 'release' then
    call('ZREM', key, id)
    -- ttl is the time the seat was held (0: unknown), hold_ttl how long
    -- the mean is kept: an exponential mean, each hold weighing 1/8.
    if ttl > 0 then
      local held = ttl
      --#hold
    end
    return {1, now}
  end
  local expires = now + ttl
  if call('ZSCORE', key, id) then
    call('ZADD', key, 'XX', expires, id)
    expire(key)
    return {1, call('ZCARD', key), 1, 0, now, 0}
  end
  if op == 'renew' then
    return {0, call('ZCARD', key), 0, 0, now, 0}
  end
  local held = call('ZCARD', key)
  if held >= limit then
    local first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
    return {0, held, 0, tonumber(first[2]) - now, now, tonumber(call('GET', holdkey)) or 0}
  end
  call('ZADD', key, expires, id)
  expire(key)
  return {1, held + 1, 0, 0, now, 0}
end

local reply, nr = {}, 0
for j = 1, (#ARGV - 2) / 4 do
  local a = 4 * j - 2
  local r = seat(KEYS[2 * j - 1], KEYS[2 * j], ARGV[a + 1], tonumber(ARGV[a + 2]), ARGV[a + 3], tonumber(ARGV[a + 4]))
  for i = 1, #r do reply[nr + i] = r[i] end
  nr = nr + #r
end
return reply
