-- tollgate decide: judges the call's entries in order and, when every one
-- admits, debits them all. The calling convention is in doc.go; assemble.go puts
-- arith.lua at --#arith and the algorithm blocks at --#judge.
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

-- ARGV[1] is the era the call is stamped with ('' for none; see
-- lineage_read.lua), and the last KEYS its slot's lineage key, read and
-- written only with an era. ARGV[2] is max_replays: -1 peeks (judges,
-- writes nothing), 0 decides without a request id, m > 0 decides with
-- one, replayed at most m times; then ARGV[3] is the markers' TTL and the
-- KEYS after the state keys are the request-id markers, one per entry. The
-- entries' arguments follow, from ARGV[head + 1].
local era = ARGV[1]
local stamped = era ~= ''
local nkeys = #KEYS - 1 -- the state keys and markers; KEYS[#KEYS] is the lineage key
local max_replays = tonumber(ARGV[2])
local peek, with_id = max_replays < 0, max_replays > 0
local head = with_id and 3 or 2
local entries = (#ARGV - head) / 5

-- The server's clock in microseconds; never the caller's.
local time = call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

-- One read of every key, and of the lineage with an era. A key of another
-- type (state left by an older layout) reads as false, absent, and is
-- overwritten on the next admission.
local got = call('MGET', unpack(KEYS, 1, stamped and nkeys + 1 or nkeys))

-- A set whose every marker was admitted before and has replays left replays
-- as a whole, without a debit; then it is judged afresh. So one admission
-- buys at most 1 + max_replays calls carrying that id within the replay TTL.
-- A replay is judged at cost 0, which only reads: it reports each identity's
-- current remaining and reset.
local replay = with_id
if with_id then
  for i = entries + 1, 2 * entries do
    local used = got[i] and tonumber(got[i])
    if not used or used >= max_replays then
      replay = false
      break
    end
  end
end

-- Two entries on one state key see each other's debits: with several entries
-- the working state is carried in work (and its TTL in keep_for), and
-- nothing is written until every entry is judged. A single decision needs
-- neither table.
local reply = {0, 0, 0, 0, 0, 0, 0} -- sized for one entry: no resize on the common path
local work, keep_for
if entries > 1 then work, keep_for = {}, {} end
local only_state, only_keep -- the single entry's write
local all = true
for i = 1, entries do
  local key, o = KEYS[i], head + 5 * (i - 1)
  local alg = tonumber(ARGV[o + 1])
  local rate = tonumber(ARGV[o + 2])     -- events per period
  local period = tonumber(ARGV[o + 3])   -- microseconds
  local capacity = tonumber(ARGV[o + 4]) -- burst (token bucket, GCRA) or rate (windows)
  local c = tonumber(ARGV[o + 5])        -- 1 <= cost <= capacity; 0 on a replay
  if replay then c = 0 end
  -- state is the key's string, or false when absent.
  local state = got[i]
  if work and work[key] then state = work[key] end

  local allowed, remaining, retry, reset = 0, 0, 0, 0
  local new_state, keep
  local span = alg == 2 and rate + rate or 0 -- see arith.lua
  --#arith
  --#judge
  if new_state then
    if work then
      work[key], keep_for[key] = new_state, keep
    else
      only_state, only_keep = new_state, keep
    end
  end
  if replay then
    allowed, retry = 1, 0
  elseif allowed == 0 then
    all = false
  end
  local r = 6 * (i - 1)
  reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = allowed, remaining, retry, reset
  reply[r + 5], reply[r + 6] = replay and 1 or 0, 0
end

if replay then
  -- INCR keeps a marker's TTL, set when the id was admitted. Entries on one
  -- state key share its marker, counted once.
  local seen = {}
  for i = entries + 1, 2 * entries do
    if not seen[KEYS[i]] then
      seen[KEYS[i]] = true
      call('INCR', KEYS[i])
    end
  end
elseif not all then
  -- All or nothing: an entry that would have been admitted is denied too,
  -- with no wait of its own.
  for r = 1, 6 * entries, 6 do reply[r] = 0 end
elseif not peek then
  -- One command writes each state and its TTL. PX counts from the server's
  -- millisecond clock, which may lag the TIME reading by up to a
  -- millisecond, hence the extra one: a key never vanishes while its state
  -- still matters, and outlives it by at most 2ms. Absent state is an idle
  -- identity.
  if only_state then
    call('SET', KEYS[1], only_state, 'PX', ceil(only_keep / 1000) + 1)
  end
  for i = 1, work and entries or 0 do
    local key = KEYS[i]
    local s = work[key]
    if s then
      call('SET', key, s, 'PX', ceil(keep_for[key] / 1000) + 1)
      work[key] = nil
    end
  end
  -- With an era, the call's lineage, and each entry answers the sequence
  -- the call wrote at (lineage_write.lua).
  if stamped and (only_state or work) then
    local lkey, lin = KEYS[#KEYS], got[nkeys + 1]
    local lseq, lera, lbase, lprev, wseq
    --#lineage_read
    --#lineage_write
    for i = 1, entries do reply[6 * i] = wseq end
  end
  -- The marker is (re)started only on admission, so a denied id leaves no
  -- trace. A plain SET is the "SET NX" of an absent marker and the reset of
  -- an exhausted one: nothing runs between the read above and this write.
  if with_id then
    for i = entries + 1, 2 * entries do
      call('SET', KEYS[i], '0', 'PX', ARGV[3])
    end
  end
end

-- The server time of the decision comes last: a refund of this call's
-- debits needs it.
reply[6 * entries + 1] = now
return reply
