-- tollgate refund: gives back the debits of one admitted decide call whose
-- set was denied elsewhere (another Cluster slot). The calling convention
-- is in doc.go. The call first claims its nonce key with SET NX: a refund
-- re-sent after a lost reply finds it taken and does nothing, so each debit
-- is given back at most once. lua.go puts arith.lua at --#arith and the
-- refund blocks at --#give_back.
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local format, match, call = string.format, string.match, redis.call

local groups = (#ARGV - 3) / 6
if not call('SET', KEYS[#KEYS], 1, 'NX', 'PX', ARGV[2]) then return 0 end
local markers = ARGV[1] == '1'
local debited_at = tonumber(ARGV[3])
local time = call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local got = call('MGET', unpack(KEYS, 1, groups))

local work = {}
for i = 1, groups do
  local key, o = KEYS[i], 3 + 6 * (i - 1)
  local alg = tonumber(ARGV[o + 1])
  local rate = tonumber(ARGV[o + 2])
  local period = tonumber(ARGV[o + 3])
  local capacity = tonumber(ARGV[o + 4])
  local c = tonumber(ARGV[o + 5])         -- the cost debited
  local remaining = tonumber(ARGV[o + 6]) -- what the debit left
  local state = work[key]
  if state == nil then state = got[i] end
  local span = alg == 2 and rate + rate or 0 -- see arith.lua
  --#arith

  -- A bucket (token bucket, GCRA) refills while the debit is out. Had it
  -- not been debited, it might have reached its capacity meanwhile and lost
  -- that refill; giving the whole cost back would then create quota. That
  -- can only happen when what the debit left, plus the cost, plus the
  -- refill since (and under one unit the debit left unseen) reaches the
  -- capacity: then the refill of the forfeit microseconds since the debit
  -- is not given back. In integers: e * rate > k * period with
  -- k = capacity - remaining - c - 1, that is e > floor(k * period / rate)
  -- (always when k < 0), with the products exact at every size.
  local forfeit = 0
  if alg <= 1 then
    local full = mulceil and mulceil(capacity, period, rate) or ceil(capacity * period / rate)
    local e = min(max(now - debited_at, 0), full)
    local k = capacity - remaining - c - 1
    if k < 0 or e > (mulfloor and mulfloor(k, period, rate) or floor(k * period / rate)) then
      forfeit = e
    end
  end

  -- The block gives c back to state (a string; absent state is already
  -- full, or holds nothing to give back) and sets new_state: the string to
  -- keep, false to delete the key (the state became that of an idle
  -- identity), nil to leave it.
  local new_state
  if state and c > 0 then
    --#give_back
  end
  if new_state ~= nil then work[key] = new_state end
end

-- A window's count keeps its expiry (KEEPTTL): the window ends when it ends.
-- A bucket's state matters less long after a refund than the debit's TTL
-- says, by at most the refunded cost's refill time.
for i = 1, groups do
  local key = KEYS[i]
  local s = work[key]
  if s then
    call('SET', key, s, 'KEEPTTL')
  elseif s == false then
    call('DEL', key)
  end
  work[key] = nil
end
-- The set was denied: its request id must leave no trace.
if markers then call('DEL', unpack(KEYS, groups + 1, 2 * groups)) end
return 1
