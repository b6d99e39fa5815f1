-- tollgate slot: in-flight slots of one identity, a sorted set of the ids
-- holding one, each scored by when it expires (us, the server's clock).
-- Expired slots are dropped first, so a caller that died frees its slot by
-- itself. Beside it, the recent mean time the identity's slots were held,
-- as their callers reported it on release. The calling convention is in
-- doc.go.
local call = redis.call
local key, holdkey = KEYS[1], KEYS[2]
local op, limit, id, ttl = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])

local time = call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

if op == 'count' then
  return {call('ZCOUNT', key, '(' .. now, '+inf'), now}
end
call('ZREMRANGEBYSCORE', key, '-inf', now)
if op == 'release' then
  call('ZREM', key, id)
  -- ttl is the time the slot was held (0: unknown), ARGV[5] how long the
  -- mean is kept: an exponential mean, each hold weighing 1/8.
  if ttl > 0 then
    local mean = tonumber(call('GET', holdkey))
    if mean then
      mean = mean - math.floor(mean / 8) + math.floor(ttl / 8)
    else
      mean = ttl
    end
    call('SET', holdkey, string.format('%d', mean), 'PX', ARGV[5])
  end
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
expire()
return {1, held + 1, 0, 0, now, 0}
