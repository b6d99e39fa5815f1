-- tollgate admit: takes an in-flight seat and decides the call's entries in
-- one call, all or nothing: the seat is taken only when every entry
-- admits, and no entry is debited when no seat is free. The calling
-- convention is in doc.go; lua.go puts the whole decide script at
-- --#decide_script, run as a function on the decide call's own KEYS and
-- ARGV.
local call = redis.call
local nkeys, nargv = #KEYS, #ARGV
local skey, hkey = KEYS[nkeys - 1], KEYS[nkeys]
local smax, sid, sttl = tonumber(ARGV[nargv - 2]), ARGV[nargv - 1], tonumber(ARGV[nargv])

local time = call('TIME')
local snow = tonumber(time[1]) * 1000000 + tonumber(time[2])
call('ZREMRANGEBYSCORE', skey, '-inf', snow)
local reused = call('ZSCORE', skey, sid) and 1 or 0
local held = call('ZCARD', skey)
if reused == 0 and held >= smax then
  local first = call('ZRANGE', skey, 0, 0, 'WITHSCORES')
  return {0, held, 0, tonumber(first[2]) - snow, snow, tonumber(call('GET', hkey)) or 0}
end

local decided
do
  local KEYS = {unpack(KEYS, 1, nkeys - 2)}
  local ARGV = {unpack(ARGV, 1, nargv - 3)}
  decided = (function()
--#decide_script
  end)()
end

local all = true
for i = 1, #decided - 1, 6 do
  if decided[i] ~= 1 then
    all = false
    break
  end
end
local seat = {2, held, reused, 0, snow, 0} -- free, not taken: the entries were denied
if not all and reused == 1 then
  call('ZREM', skey, sid) -- a denied call holds no seat
  seat[2] = held - 1
elseif all then
  call('ZADD', skey, snow + sttl, sid)
  local last = call('ZRANGE', skey, -1, -1, 'WITHSCORES')
  call('PEXPIRE', skey, math.ceil((tonumber(last[2]) - snow) / 1000) + 1)
  seat[1], seat[2] = 1, held + 1 - reused
end
for i = 1, #decided do seat[6 + i] = decided[i] end
return seat
