-- tollgate batch: many independent decisions in one call, followed by
-- arith.lua, the four algorithm blocks and batch_end.lua. The calling
-- convention is in doc.go: the call's distinct profiles first (a profile
-- is everything a decision's own decide call sends but its keys), then one
-- argument per decision naming its profile. Each decision is judged and
-- written on its own, in order, exactly as the same decisions sent one
-- decide call each would be: two decisions on one key see each other's
-- writes.
--
-- Nothing is written until every argument has been read and checked: a
-- call whose arguments do not add up fails as a whole, before any write; a
-- decision whose numbers (its profile's: limit, TTL, cost) are out of
-- range answers -1 alone and the others are judged. A write that Redis
-- refuses (a marker that is not an integer) fails only its own decision,
-- which answers -2.
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local format, match, call, pcall_ = string.format, string.match, redis.call, redis.pcall

local nargv = #ARGV

-- isint reports an integer argument in [lo, 2^53).
local function isint(v, lo)
  return v and v == floor(v) and v >= lo and v < 9007199254740992
end

-- The profiles, each read and checked once however many decisions use it:
-- ARGV[1] is their number, then seven each: mode, replay TTL, algorithm,
-- rate, period, capacity, cost. A profile whose numbers the algorithms
-- cannot judge is kept as algorithm -1, which no block runs, so that every
-- decision of it answers -1 (arith.lua still reads numbers). name maps
-- the argument naming profile p ("1", "2", ...) to p: one table lookup per
-- decision instead of a conversion and its checks.
local nprofiles = tonumber(ARGV[1])
if not (isint(nprofiles, 1) and 1 + 7 * nprofiles < nargv) then
  return redis.error_reply('ERR tollgate batch: ' .. nargv .. ' arguments do not hold profiles and decisions')
end
local pmode, pttl, palg, prate, pperiod, pcap, pcost, pkeys, name = {}, {}, {}, {}, {}, {}, {}, {}, {}
for p = 1, nprofiles do
  local o = 7 * p - 5
  local mode, ttl, alg = tonumber(ARGV[o]), tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2])
  local rate, period, capacity, c = tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5]), tonumber(ARGV[o + 6])
  if not isint(mode, -1) then
    return redis.error_reply('ERR tollgate batch: profile ' .. p .. ' has no mode')
  end
  pmode[p], pttl[p], pkeys[p], name[tostring(p)] = mode, ttl, mode > 0 and 2 or 1, p
  if isint(alg, 0) and alg <= 3 and isint(rate, 1) and isint(capacity, 1) and isint(c, 1) and c <= capacity
      and (isint(period, 1) or (alg == 3 and isint(period, -4) and period < 0))
      and (mode <= 0 or isint(ttl, 1)) then
    palg[p], prate[p], pperiod[p], pcap[p], pcost[p] = alg, rate, period, capacity, c
  else
    palg[p], prate[p], pperiod[p], pcap[p], pcost[p] = -1, 1, 1, 1, 1
  end
end

-- The decisions, one argument each from ARGV[base + 1]: the shape of the
-- call, checked before anything is read or written. of[d] is decision d's
-- profile.
local base = 1 + 7 * nprofiles
local n = nargv - base
local k, of = 0, {}
for d = 1, n do
  local p = name[ARGV[base + d]]
  if not p then
    return redis.error_reply('ERR tollgate batch: decision ' .. d .. ' names no profile of the call')
  end
  of[d], k = p, k + pkeys[p]
end
if k ~= #KEYS then
  return redis.error_reply('ERR tollgate batch: ' .. #KEYS .. ' keys and ' .. n .. ' decisions do not make whole decisions')
end

-- The server's clock in microseconds, once for the whole call.
local time = call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

-- One read of every key. A key of another type reads as false, absent, and
-- is overwritten on the next admission, as in the decide script. What this
-- call writes is carried in written (key -> state string or marker count),
-- which later decisions read instead.
local got = call('MGET', unpack(KEYS))
local written = {}
local reply = {}

k = 0
for d = 1, n do
  local p = of[d]
  local max_replays = pmode[p]
  local peek, with_id = max_replays < 0, max_replays > 0
  local key, marker, ttl = KEYS[k + 1], false, false
  local state, used = got[k + 1], false
  if written[key] then state = written[key] end
  if with_id then
    ttl, marker = pttl[p], KEYS[k + 2]
    used = written[marker]
    if used == nil then used = got[k + 2] and tonumber(got[k + 2]) end
    k = k + 2
  else
    k = k + 1
  end
  local alg = palg[p]
  local rate = prate[p]     -- events per period
  local period = pperiod[p] -- microseconds
  local capacity = pcap[p]  -- burst (token bucket, GCRA) or rate (windows)
  local c = pcost[p]        -- 1 <= cost <= capacity; 0 on a replay
  -- An admitted id with replays left replays, judged at cost 0 (a read).
  local replay = with_id and used and used < max_replays
  if replay then c = 0 end
  local allowed, remaining, retry, reset = 0, 0, 0, 0
  local new_state, keep
