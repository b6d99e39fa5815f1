-- tollgate batch: many independent decisions in one call, followed by
-- arith.lua, the four algorithm blocks and batch_end.lua. The calling
-- convention is in doc.go. Each decision is judged and written on its own,
-- in order, exactly as the same decisions sent one decide call each would
-- be: two decisions on one key see each other's writes.
--
-- Nothing is written until every decision's arguments have been read and
-- checked: a call whose arguments do not add up fails as a whole, before
-- any write; a decision whose own numbers are out of range answers -1
-- alone and the others are judged. A write that Redis refuses (a marker
-- that is not an integer) fails only its own decision, which answers -2.
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local format, match, call, pcall_ = string.format, string.match, redis.call, redis.pcall

local nargv = #ARGV

-- isint reports an integer argument in [lo, 2^53).
local function isint(v, lo)
  return v and v == floor(v) and v >= lo and v < 9007199254740992
end

-- First pass: the shape of the call and every decision's numbers. bad[d]
-- is set for a decision whose numbers the algorithms cannot judge.
-- num holds the arguments as numbers, at their ARGV index, so that the
-- second pass does not convert them again (measured with
-- BenchmarkBatchServerCost's setup: about 5% of a decision's Redis time
-- without a request id).
local n, a, k, bad, num = 0, 0, 0, false, {}
while a < nargv do
  local mode = tonumber(ARGV[a + 1])
  if not isint(mode, -1) then
    return redis.error_reply('ERR tollgate batch: decision ' .. (n + 1) .. ' has no mode')
  end
  n = n + 1
  num[a + 1] = mode
  if mode > 0 then
    local ttl = tonumber(ARGV[a + 2])
    if not isint(ttl, 1) then bad = bad or {}; bad[n] = true end
    num[a + 2] = ttl
    a, k = a + 2, k + 2
  else
    a, k = a + 1, k + 1
  end
  local alg, rate, period = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local capacity, c = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  num[a + 1], num[a + 2], num[a + 3], num[a + 4], num[a + 5] = alg, rate, period, capacity, c
  if not (isint(alg, 0) and alg <= 3 and isint(rate, 1) and isint(capacity, 1) and isint(c, 1) and c <= capacity
      and (isint(period, 1) or (alg == 3 and isint(period, -4) and period < 0))) then
    bad = bad or {}
    bad[n] = true
  end
  a = a + 5
end
if n == 0 or a ~= nargv or k ~= #KEYS then
  return redis.error_reply('ERR tollgate batch: ' .. #KEYS .. ' keys and ' .. nargv .. ' arguments do not make whole decisions')
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

a, k = 0, 0
for d = 1, n do
  local max_replays = num[a + 1]
  local peek, with_id = max_replays < 0, max_replays > 0
  local key, marker, ttl = KEYS[k + 1], false, false
  local state, used = got[k + 1], false
  if written[key] then state = written[key] end
  if with_id then
    ttl, marker = num[a + 2], KEYS[k + 2]
    used = written[marker]
    if used == nil then used = got[k + 2] and tonumber(got[k + 2]) end
    a, k = a + 2, k + 2
  else
    a, k = a + 1, k + 1
  end
  local alg = num[a + 1]
  local rate = num[a + 2]     -- events per period
  local period = num[a + 3]   -- microseconds
  local capacity = num[a + 4] -- burst (token bucket, GCRA) or rate (windows)
  local c = num[a + 5]        -- 1 <= cost <= capacity; 0 on a replay
  a = a + 5
  -- An admitted id with replays left replays, judged at cost 0 (a read).
  local replay = with_id and used and used < max_replays
  if replay then c = 0 end
  local allowed, remaining, retry, reset = 0, 0, 0, 0
  local new_state, keep
  if bad and bad[d] then -- no block runs; arith.lua reads numbers
    alg, rate, period, capacity, c = -1, 1, 1, 1, 1
  end
