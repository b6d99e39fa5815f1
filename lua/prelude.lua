-- tollgate prelude: shared by the decide script, followed by group.lua (the
-- loop over the call's groups), the four algorithm blocks and main.lua. The
-- calling convention is in doc.go.
--
-- Lua numbers are IEEE doubles. Every integer below stays under 2^53 (see
-- Limit.Validate), and for integers a >= 0, b > 0 below 2^53 the quotient
-- a / b is correctly rounded, so floor(a / b) and ceil(a / b) are the exact
-- integer quotients; larger products go through arith.lua. The Go mirror
-- computes the same integers and agrees bit for bit.
--
-- Each redis.call costs Redis more than the arithmetic of a whole decision, so
-- a call makes as few as it can: TIME, one MGET of every key, and when it
-- admits one SET ... PX per key it writes (state as a short string, not a
-- hash, so that one command writes it and sets its TTL).
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local format, match, call = string.format, string.match, redis.call

-- ARGV[1] is the mode: -1 peeks (judges, writes nothing), 0 decides without
-- a request id, n > 0 decides with one, replayed at most n times; then
-- ARGV[2] is the markers' TTL and the KEYS after the state keys are the
-- request-id markers, one per group. The groups' arguments follow, from
-- ARGV[head + 1].
local max_replays = tonumber(ARGV[1])
local peek, with_id = max_replays < 0, max_replays > 0
local head = with_id and 2 or 1
local groups = (#ARGV - head) / 5

-- The server's clock in microseconds; never the caller's.
local time = call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

-- One read of every key. A key of another type (state left by an older
-- layout) reads as false, absent, and is overwritten on the next admission.
local got = call('MGET', unpack(KEYS))

-- A set whose every marker was admitted before and has replays left replays
-- as a whole, without a debit; then it is judged afresh. So one admission
-- buys at most 1 + max_replays calls carrying that id within the replay TTL.
-- A replay is judged at cost 0, which only reads: it reports each identity's
-- current remaining and reset.
local replay = with_id
if with_id then
  for i = groups + 1, 2 * groups do
    local used = got[i] and tonumber(got[i])
    if not used or used >= max_replays then
      replay = false
      break
    end
  end
end
