-- tollgate slot: in-flight slots of one identity, a sorted set of the ids
-- holding one, each scored by when it expires (us, the server's clock).
-- Expired slots are dropped first, so a caller that died frees its slot by
-- itself. The calling convention is in doc.go.
local call = redis.call
local key = KEYS[1]
local op, limit, id, ttl = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])

local time = call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

if op == 'count' then
  return {call('ZCOUNT', key, '(' .. now, '+inf'), now}
end
call('ZREMRANGEBYSCORE', key, '-inf', now)
if op == 'release' then
  call('ZREM', key, id)
  return {1, now}
end

-- The key lives as long as its last slot: set after every change.
local function expire()
  local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then call('PEXPIRE', key, math.ceil((tonumber(last[2]) - now) / 1000) + 1) end
end

local expires = now + ttl
if call('ZSCORE', key, id) then
  call('ZADD', key, 'XX', expires, id)
  expire()
  return {1, call('ZCARD', key), 1, 0, now}
end
if op == 'renew' then
  return {0, call('ZCARD', key), 0, 0, now}
end
local held = call('ZCARD', key)
if held >= limit then
  local first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, held, 0, tonumber(first[2]) - now, now}
end
call('ZADD', key, expires, id)
expire()
return {1, held + 1, 0, 0, now}
