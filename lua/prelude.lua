-- tollgate prelude: shared by every script, followed by one algorithm file
-- (which defines the decision block) and main.lua. The calling convention
-- is in doc.go.
--
-- Lua numbers are IEEE doubles. Every integer below stays under 2^53 (see
-- Limit.Validate), and for integers a >= 0, b > 0 below 2^53 the quotient
-- a / b is correctly rounded, so floor(a / b) and ceil(a / b) are the exact
-- integer quotients: the Go mirror uses integer division and agrees bit for bit.
--
-- Each redis.call costs Redis more than the arithmetic of a whole decision, so
-- a decision makes as few as it can: TIME, one read of everything it needs,
-- and on admission one SET ... PX per key it writes (state as a short string,
-- not a hash, so that one command writes it and sets its TTL). Every argument
-- and key costs a little too, so a call without a request id sends neither
-- KEYS[2] nor ARGV[5..6].
local rate = tonumber(ARGV[1])        -- events per period
local period = tonumber(ARGV[2])      -- microseconds
local capacity = tonumber(ARGV[3])    -- burst (token bucket, GCRA) or rate (windows)
local cost = tonumber(ARGV[4])        -- 1 <= cost <= capacity
local max_replays = tonumber(ARGV[5]) -- nil: no request id

local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local format, match, call = string.format, string.match, redis.call

-- The server's clock in microseconds; never the caller's.
local time = call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

-- state is KEYS[1] (a string, or false when absent) and used the request
-- id's replay count (KEYS[2]). The keys share one hash tag, so one MGET
-- reads both. A key of another type (state left by an older layout) reads
-- as absent and is overwritten on the next admission: MGET answers false
-- for it, and the GET's error is caught.
local state, used
if max_replays then
  local got = call('MGET', KEYS[1], KEYS[2])
  state, used = got[1], got[2]
else
  state = redis.pcall('GET', KEYS[1])
  if type(state) ~= 'string' then state = false end
end

-- A request id admitted before replays without a debit, max_replays times;
-- then it is judged afresh. So one admission buys at most 1 + max_replays
-- calls carrying that id within the replay TTL. A replay is judged at cost
-- 0, which only reads: it reports the identity's current remaining and reset.
local replay = used and tonumber(used) < max_replays
local c = cost
if replay then c = 0 end

-- The algorithm's block judges cost c at now from state and sets the reply's
-- allowed, remaining, retry and reset (us); when it admits c > 0 it also sets
-- the new state, formatted with %d so that it is plain decimal integers
-- whatever number formatting the Redis version applies to doubles (Lua's
-- tostring turns a timestamp of 1.8e15 into exponent form), and keep, the
-- microseconds from now that the state matters. The block is inline code, not
-- a function, so that a decision creates no closure.
local allowed, remaining, retry, reset = 0, 0, 0, 0
local new_state, keep
