-- tollgate restore: brings a primary that took keys over from another (a
-- promoted replica, a restarted node) up to date with the writes the
-- other made that it never received. Each entry is one write the store
-- journaled: its key, what it did (units debited past empty, or given
-- back), the sequence and era its key's lineage took (lineage_read.lua),
-- and when its effect ends. An entry is applied only when the state here
-- does not hold it already, by the lineage the key had when the call
-- began, and only while its effect lasts; then its request-id marker or
-- settlement record is restored too. The calling convention is in doc.go;
-- assemble.go puts arith.lua at --#arith, the settle blocks at --#settle,
-- the algorithm blocks at --#judge and the lineage blocks at --#lineage_*.
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local format, match, call = string.format, string.match, redis.call
local MAX_DEBT = 1125899906842624 -- 2^50 us, as in settle.lua

-- ARGV[1] is the era this call is stamped with: the restored writes
-- become this primary's own. Then 13 per entry (doc.go).
local era = ARGV[1]
local entries = (#ARGV - 1) / 13

local time = call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

-- An entry whose effect has ended takes with it every earlier write of the
-- same key it follows: the state it left had refilled, or its window
-- closed, by now. gone[key] is the last such entry.
local gone, skeys = {}, {}
for i = 1, entries do
  skeys[i] = KEYS[2 * i - 1]
  if tonumber(ARGV[1 + 13 * (i - 1) + 10]) <= now then gone[skeys[i]] = i end
end
local got = call('MGET', unpack(skeys))

-- origin[key] is the key's lineage when the call began, which every entry
-- of the key is compared with; work and keep_for what the call writes.
local origin, work, keep_for, seq_of, applied = {}, {}, {}, {}, {}
local lseq, lera, lbase, lprev, wseq
for i = 1, entries do
  local key, aux, o = KEYS[2 * i - 1], KEYS[2 * i], 1 + 13 * (i - 1)
  local alg = tonumber(ARGV[o + 1])
  local rate = tonumber(ARGV[o + 2])
  local period = tonumber(ARGV[o + 3])
  local capacity = tonumber(ARGV[o + 4])
  local delta = tonumber(ARGV[o + 5])        -- units debited past empty; below 0, given back
  local debited_at = tonumber(ARGV[o + 6])   -- a give-back's admission (us)
  local adm_reset = tonumber(ARGV[o + 7])    -- how far from full it left a bucket (us)
  local eseq, eera = tonumber(ARGV[o + 8]), ARGV[o + 9]
  local expires = tonumber(ARGV[o + 10])     -- when the write's effect ends (us)
  local aux_kind = tonumber(ARGV[o + 11])    -- 0 none, 1 marker, 2 record
  local state = got[i]
  if work[key] ~= nil then state = work[key] end
  --#lineage_read
  if not origin[key] then origin[key] = {lseq, lera, lbase, lprev} end
  local from = origin[key]
  local held = false
  if from[2] == eera then
    held = eseq <= from[1]
  elseif from[4] == eera then
    held = eseq <= from[3]
  end
  applied[i] = 0
  if not held and expires > now and i > (gone[key] or 0) then
    applied[i] = 1
    local span = 9007199254740992 -- every arith.lua function defined, as in settle.lua
    --#arith
    local result -- the state to keep: a string, false to delete, nil to leave it
    if delta ~= 0 then
      local new_state
      --#settle
      result = new_state
    end
    if result ~= nil then
      local keep_after = 0
      if result then
        -- How long the state matters: its time to full (a window: until
        -- its window ends), as the settle script keeps it.
        local c = 0
        local allowed, remaining, retry, reset = 0, 0, 0, 0
        local new_state, keep
        state = result
        --#judge
        keep_after = reset
        if alg == 3 then
          if period > 0 then
            keep_after = (floor(now / period) + 1) * period - now
          else
            local _, next_start = calendar(now, -period)
            keep_after = next_start - now
          end
        end
        new_state = result
        --#lineage_write
        result, seq_of[key] = new_state, wseq
      end
      work[key], keep_for[key] = result, keep_after
    end
    if aux_kind == 1 then
      call('SET', aux, '0', 'NX', 'PX', ARGV[o + 13])
    elseif aux_kind == 2 then
      call('SET', aux, ARGV[o + 12], 'PX', ARGV[o + 13])
    end
  end
end

-- One command per key written, as the settle script writes: its state
-- with its TTL, or DEL for an idle identity.
local reply, done = {}, {}
for i = 1, entries do
  local key = skeys[i]
  local s = work[key]
  if s ~= nil and not done[key] then
    done[key] = true
    if s then
      call('SET', key, s, 'PX', ceil(keep_for[key] / 1000) + 1)
    else
      call('DEL', key)
    end
  end
  reply[3 * i - 2], reply[3 * i - 1], reply[3 * i] = applied[i], seq_of[key] or 0, keep_for[key] or 0
end
reply[3 * entries + 1] = now
return reply
