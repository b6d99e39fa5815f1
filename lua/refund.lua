-- tollgate refund: gives back the debits of one admitted decide call whose
-- set was denied elsewhere (another Cluster slot). The calling convention
-- is in doc.go. The call first claims its nonce key with SET NX: a refund
-- re-sent after a lost reply finds it taken and does nothing, so each debit
-- is given back at most once.
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
