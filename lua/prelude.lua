-- tollgate prelude: shared by every script, followed by one algorithm file
-- (which defines decide) and main.lua. The calling convention is in doc.go.
--
-- Lua numbers are IEEE doubles. Every integer below stays under 2^53 (see
-- Limit.Validate), and for integers a >= 0, b > 0 below 2^53 the quotient
-- a / b is correctly rounded, so floor(a / b) and ceil(a / b) are the exact
-- integer quotients: the Go mirror uses integer division and agrees bit for bit.
local rate = tonumber(ARGV[1])        -- events per period
local period = tonumber(ARGV[2])      -- microseconds
local capacity = tonumber(ARGV[3])    -- burst (token bucket, GCRA) or rate (windows)
local cost = tonumber(ARGV[4])        -- 1 <= cost <= capacity
local max_replays = tonumber(ARGV[5]) -- 0: no request id
local replay_ttl = tonumber(ARGV[6])  -- ms
local nonce_ttl = tonumber(ARGV[7])   -- ms; 0: no nonce

local floor, ceil = math.floor, math.ceil

-- The server's clock in microseconds; never the caller's.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

-- int formats an integer for writing, so stored state is a plain decimal
-- integer whatever number formatting the Redis version applies to doubles.
local function int(x)
  return string.format('%d', x)
end

-- ttl_ms is the PEXPIRE for state that stops mattering us microseconds from
-- now. PEXPIRE counts from the server's millisecond clock, which may lag the
-- TIME reading by up to a millisecond, hence the extra one: a key never
-- vanishes while its state still matters, and outlives it by at most 2ms.
local function ttl_ms(us)
  return ceil(us / 1000) + 1
end
