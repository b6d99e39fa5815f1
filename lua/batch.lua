-- tollgate batch: many independent decisions in one call. The calling
-- convention is in doc.go: the call's distinct profiles first (a profile
-- is everything a decision's own decide call sends but its keys), then one
-- argument per decision naming its profile; or, when the decisions share
-- too few profiles for that to pay, each decision's profile in turn. Each
-- decision is judged and written on its own, in order, exactly as the same
-- decisions sent one decide call each would be: two decisions on one key
-- see each other's writes. assemble.go puts arith.lua at --#arith and the
-- algorithm blocks at --#judge.
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

-- ARGV[1] is the era the call is stamped with ('' for none; see
-- lineage_read.lua), and the last KEYS the call's slot's lineage key, read
-- and written only with an era. Then the profiles, each read and checked once however
-- many decisions use it. ARGV[2] is their number, then seven each:
-- max_replays, replay TTL, algorithm, rate, period, capacity, cost. Or
-- ARGV[2] is 0 (inline) and every decision's profile follows, as its decide
-- call's arguments after the era: the TTL only when max_replays is above 0.
-- A profile whose numbers the algorithms cannot judge is kept as algorithm
-- -1, which no block runs, so that every decision of it answers -1
-- (arith.lua still reads numbers).
local era = ARGV[1]
local stamped = era ~= ''
local nprofiles = tonumber(ARGV[2])
if not (isint(nprofiles, 0) and 2 + 7 * nprofiles < nargv) then
  return redis.error_reply('ERR tollgate batch: ' .. nargv .. ' arguments do not hold profiles and decisions')
end
local inline = nprofiles == 0
local preplays, pttl, palg, prate, pperiod, pcap, pcost, pkeys = {}, {}, {}, {}, {}, {}, {}, {}
-- name maps the argument naming profile p ("1", "2", ...) to p: one table
-- lookup per decision instead of a conversion and its checks.
local name = not inline and {}
local p, a = 0, 2 -- profiles read, arguments read
while (inline and a < nargv) or p < nprofiles do
  local max_replays = tonumber(ARGV[a + 1])
  if not isint(max_replays, -1) then
    return redis.error_reply('ERR tollgate batch: ' .. (inline and 'decision ' or 'profile ') .. (p + 1) .. ' has no mode')
  end
  p = p + 1
  local ttl = false
  if max_replays > 0 or not inline then
    ttl, a = tonumber(ARGV[a + 2]), a + 1
  end
  local alg, rate, period = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local capacity, c = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  a = a + 6
  preplays[p], pttl[p], pkeys[p] = max_replays, ttl, max_replays > 0 and 2 or 1
  if name then name[tostring(p)] = p end
  if isint(alg, 0) and alg <= 3 and isint(rate, 1) and isint(capacity, 1) and isint(c, 1) and c <= capacity
      and (isint(period, 1) or (alg == 3 and isint(period, -4) and period < 0))
      and (max_replays <= 0 or isint(ttl, 1)) then
    palg[p], prate[p], pperiod[p], pcap[p], pcost[p] = alg, rate, period, capacity, c
    -- The marker's value and PX go to Redis as strings, this one formatted
    -- once per profile: Redis formats a number argument with "%.17g" on
    -- every write.
    if max_replays > 0 then pttl[p] = format('%d', ttl) end
  else
    palg[p], prate[p], pperiod[p], pcap[p], pcost[p] = -1, 1, 1, 1, 1
  end
end

-- The decisions: inline, decision d is profile d; else one argument each
-- from ARGV[a + 1], and of[d] is decision d's profile. The shape of the
-- call is checked before anything is read or written.
local n, k, of = p, 0, false
if inline then
  if a ~= nargv then
    return redis.error_reply('ERR tollgate batch: ' .. nargv .. ' arguments do not make whole decisions')
  end
  for d = 1, n do k = k + pkeys[d] end
else
  n, of = nargv - a, {}
  for d = 1, n do
    local q = name[ARGV[a + d]]
    if not q then
      return redis.error_reply('ERR tollgate batch: decision ' .. d .. ' names no profile of the call')
    end
    of[d], k = q, k + pkeys[q]
  end
end
if k + 1 ~= #KEYS then
  return redis.error_reply('ERR tollgate batch: ' .. #KEYS .. ' keys and ' .. n .. ' decisions do not make whole decisions')
end

-- The server's clock in microseconds, once for the whole call.
local time = call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

-- One read of every key, and of the lineage with an era. A key of another
-- type reads as false, absent, and is overwritten on the next admission,
-- as in the decide script. What this call writes is carried in written
-- (key -> state string or marker count), which later decisions read
-- instead.
local got = call('MGET', unpack(KEYS, 1, stamped and k + 1 or k))
local lin = stamped and got[k + 1]
local written, wrote = {}, false
local reply, nr = {}, 0 -- nr: the reply's integers so far

k = 0
for d = 1, n do
  local p = d
  if of then p = of[d] end
  local max_replays = preplays[p]
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
  local wrote_state = 0 -- 4 once the decision's state is written
  local span = alg == 2 and rate + rate or 0 -- see arith.lua
  --#arith
  --#judge
  if alg == -1 then
    allowed = -1
  elseif replay then
    -- INCR keeps the marker's TTL, set when the id was admitted.
    local v = pcall_('INCR', marker)
    if type(v) == 'table' and v.err and string.sub(v.err, 1, 9) == 'READONLY ' then
      return v -- a demoted primary, as below
    elseif type(v) == 'table' then
      allowed = -2
    else
      allowed, retry, written[marker] = 1, 0, v
    end
  elseif allowed == 1 and not peek then
    -- As in the decide script: one SET ... PX per key, the state first, so
    -- that a marker never stands for a debit that was not made. Once the
    -- state is written the decision is admitted, whatever its marker's fate.
    local v = pcall_('SET', key, new_state, 'PX', ceil(keep / 1000) + 1)
    if type(v) == 'table' and v.err and string.sub(v.err, 1, 9) == 'READONLY ' then
      -- A demoted primary: no write of this call can have succeeded. The
      -- whole call fails with READONLY, on which the client drops the
      -- connection and the store goes on against the new primary.
      return v
    elseif type(v) == 'table' and v.err then
      allowed = -2
    else
      written[key], wrote, wrote_state = new_state, true, 4
      if with_id then
        v = pcall_('SET', marker, '0', 'PX', ttl) -- strings: see the profiles above
        if not (type(v) == 'table' and v.err) then written[marker] = 0 end
      end
    end
  end
  -- The reply, compact (doc.go): a code that holds allowed, replayed,
  -- whether the decision wrote its state, and remaining, then the reset,
  -- then the retry only when denied (it is 0 when admitted). Each integer
  -- of a reply costs Redis a conversion and the client a parse: a decision
  -- answers two, against six.
  if allowed < 0 then
    reply[nr + 1], nr = allowed, nr + 1
  elseif allowed == 1 then
    reply[nr + 1], reply[nr + 2], nr = remaining * 8 + wrote_state + 2 + (replay and 1 or 0), reset, nr + 2
  else
    reply[nr + 1], reply[nr + 2], reply[nr + 3], nr = remaining * 8, reset, retry, nr + 3
  end
end

-- With an era, the call's lineage, once for all its writes; the reply
-- ends with the sequence the call wrote at (0: none) and the time.
local wseq = 0
if stamped and wrote then
  local lkey = KEYS[k + 1]
  local lseq, lera, lbase, lprev
  --#lineage_read
  --#lineage_write
end
reply[nr + 1], reply[nr + 2] = wseq, now
return reply
