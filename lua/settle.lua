-- tollgate settle: makes the final cost of admitted requests what their
-- calls really cost, giving the difference back or debiting it past empty;
-- or debits requests whether or not they fit (overdraw). The calling
-- convention is in doc.go; assemble.go puts arith.lua at --#arith, the settle
-- blocks at --#settle and the algorithm blocks at --#judge, which answers
-- what a request would get after the settlement. The Go mirror is
-- internal/algo's Settle and Overdraw.
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local format, match, call = string.format, string.match, redis.call
local MAX_DEBT = 1125899906842624 -- 2^50 us: a debt reaches no further past now (algo.MaxDebtTime)

-- ARGV[1] is the era the call is stamped with ('' for none; see
-- lineage_read.lua), and the last KEYS the call's slot's lineage key, read
-- and written only with an era. ARGV[2] is the mode: 0 settles, 1 settles with a
-- record per entry (the KEYS after the state keys), 2 overdraws, 3 settles
-- with records and then deletes the request-id markers (the KEYS after the
-- records: the refund of a set denied on another Cluster slot), 4 looks:
-- answers as 0 does and writes nothing (a Peek reading the debt); ARGV[3]
-- is the records' TTL.
local era = ARGV[1]
local stamped = era ~= ''
local mode = tonumber(ARGV[2])
local with_record, overdraw, look = mode == 1 or mode == 3, mode == 2, mode == 4
local entries = (#ARGV - 3) / 8

local time = call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
-- One read of the states and records, and of the lineage with an era
-- when it follows them (mode 3 has the markers in between).
local nread = with_record and 2 * entries or entries
local lin_read = stamped and mode ~= 3
local got = call('MGET', unpack(KEYS, 1, lin_read and nread + 1 or nread))

-- What this call writes, by key: a state string, or false to delete it;
-- and the PX of each written state.
local work, keep_for = {}, {}
local reply = {}
local wrote = {} -- wrote[i]: entry i wrote a state
for i = 1, entries do
  local key, o = KEYS[i], 3 + 8 * (i - 1)
  local alg = tonumber(ARGV[o + 1])
  local rate = tonumber(ARGV[o + 2])
  local period = tonumber(ARGV[o + 3])
  local capacity = tonumber(ARGV[o + 4])
  local cost = tonumber(ARGV[o + 5])          -- the request's cost: what was reserved, or what to overdraw
  local final = tonumber(ARGV[o + 6])         -- the final cost
  local debited_at = tonumber(ARGV[o + 7])    -- when the reservation was debited (us)
  local adm_reset = tonumber(ARGV[o + 8])     -- how far from full it left a bucket (us)
  local state = got[i]
  if work[key] ~= nil then state = work[key] end
  -- arith.lua's functions are all defined here (span past 2^53): a debt's
  -- products outgrow the limit's own.
  local span = 9007199254740992
  --#arith
  local bucket = alg <= 1 -- a token bucket or GCRA: adm_reset matters
  if debited_at == 0 then
    -- An admission nobody kept (a refund of hits): as if debited now from
    -- an empty bucket.
    debited_at = now
    if bucket then adm_reset = mulceil(capacity, period, rate) end
  end
  local reserved = cost
  if with_record then
    -- Settled before: only the difference from that settlement applies,
    -- as if the admission had debited it: its bucket that much further
    -- from full, or nearer (rounded nearer; algo's debtTime).
    local prev = got[entries + i] and tonumber(got[entries + i])
    if prev then
      local d = prev - reserved
      if d ~= 0 and bucket then
        local u = d > 0 and d or -d
        local dt = MAX_DEBT
        if u * period / rate <= 1.5 * MAX_DEBT then dt = min(mulceil(u, period, rate), MAX_DEBT) end
        if d > 0 then adm_reset = adm_reset + dt - 1 else adm_reset = adm_reset - dt end
      end
      reserved = prev
    end
  end

  local result -- the state to keep: a string, false to delete, nil to leave it
  local fitted, keep_after
  local delta = final - reserved
  if overdraw then
    -- It may fit; a cost above the capacity never does.
    if cost <= capacity then
      local c = cost
      local allowed, remaining, retry, reset = 0, 0, 0, 0
      local new_state, keep
      --#judge
      fitted = allowed == 1
      if fitted then
        result, keep_after, delta = new_state, keep, 0
        reply[#reply + 1], reply[#reply + 2], reply[#reply + 3], reply[#reply + 4], reply[#reply + 5] = 1, remaining, 0, reset, 0
        reply[#reply + 1], reply[#reply + 2] = 0, 0 -- the sequence written and the units applied, set below
      end
    end
    if not fitted then delta = cost end
  end
  if delta ~= 0 then
    local new_state
    --#settle
    result = new_state
  end
  if not fitted then
    -- The answer: would a request of cost (at most the capacity) be
    -- admitted now, and when if not; and what is available now (no debit)
    -- and the time to full.
    local before = state
    if result ~= nil then state = result or false end
    local a_allowed, a_retry
    do
      local c = min(cost, capacity)
      local allowed, remaining, retry, reset = 0, 0, 0, 0
      local new_state, keep
      --#judge
      a_allowed, a_retry = allowed, retry
    end
    local c = 0
    local allowed, remaining, retry, reset = 0, 0, 0, 0
    local new_state, keep
    --#judge
    if overdraw then a_allowed = 0 end
    local debt = 0
    --#debt
    reply[#reply + 1], reply[#reply + 2], reply[#reply + 3], reply[#reply + 4], reply[#reply + 5] = a_allowed, remaining, a_retry, reset, debt
    reply[#reply + 1], reply[#reply + 2] = 0, 0 -- the sequence written and the units applied, set below
    --#keep_after
    state = before
  end
  if result ~= nil then
    if result and not look then
      -- The units applied, debited (a debit past empty, or an overdraw
      -- that fitted) or, below 0, given back: what restoring the write
      -- applies again.
      wrote[i], reply[7 * i] = true, fitted and cost or delta
    end
    work[key], keep_for[key] = result, keep_after
  end
end

-- One command per key written: its state with its TTL (PX counts from the
-- server's millisecond clock, hence the extra one, as in decide.lua), or
-- DEL for an idle identity. Then each entry's record of what it was
-- settled at.
for i = 1, look and 0 or entries do
  local key = KEYS[i]
  local s = work[key]
  if s then
    call('SET', key, s, 'PX', ceil(keep_for[key] / 1000) + 1)
  elseif s == false then
    call('DEL', key)
  end
  work[key] = nil
end
if with_record then
  for i = 1, entries do
    call('SET', KEYS[entries + i], ARGV[3 + 8 * (i - 1) + 6], 'PX', ARGV[3])
  end
end
-- A refunded set was denied: its request id must leave no trace.
if mode == 3 then call('DEL', unpack(KEYS, 2 * entries + 1, 3 * entries)) end
-- With an era, the call's lineage, once, when it wrote a state; each
-- entry that wrote one answers the sequence the call wrote at.
if stamped and next(wrote) then
  local lkey, lin = KEYS[#KEYS], false
  if lin_read then lin = got[nread + 1] else lin = call('GET', lkey) end
  local lseq, lera, lbase, lprev, wseq
  --#lineage_read
  --#lineage_write
  for i in pairs(wrote) do reply[7 * i - 1] = wseq end
end
reply[#reply + 1] = now
return reply
