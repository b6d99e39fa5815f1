-- tollgate finish: the end of calls in one call: their settlements, as a
-- settle call makes them, then the release of their in-flight seats (after
-- the settlements, so that no seat is freed before its call's settlement
-- is recorded). The calling convention is in doc.go; lua.go puts the whole
-- settle script at --#settle_script, run as a function on the settle
-- call's own KEYS and ARGV.
local call = redis.call
local nargv = #ARGV
local m = tonumber(ARGV[nargv])          -- seats to release
local hold_ttl = ARGV[nargv - 1]         -- PX of a mean hold time
local skeys = #KEYS - 2 * m              -- the settle call's KEYS
local sargv = nargv - 2 - 2 * m          -- the settle call's ARGV (the era alone when it settles nothing)

local settled
if skeys > 0 then
  local KEYS = {unpack(KEYS, 1, skeys)}
  local ARGV = {unpack(ARGV, 1, sargv)}
  settled = (function()
--#settle_script
  end)()
else
  local time = call('TIME')
  settled = {tonumber(time[1]) * 1000000 + tonumber(time[2])}
end
local now = settled[#settled]

for j = 1, m do
  local key, holdkey = KEYS[skeys + 2 * j - 1], KEYS[skeys + 2 * j]
  local id, held = ARGV[sargv + 2 * j - 1], tonumber(ARGV[sargv + 2 * j])
  call('ZREMRANGEBYSCORE', key, '-inf', now)
  call('ZREM', key, id)
  if held > 0 then
    --#hold
  end
end
return settled
