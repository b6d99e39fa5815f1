-- tollgate restore: brings a primary that took keys over from another (a
-- promoted replica, a restarted node) up to date with the writes the
-- other made that it never received. Each entry is one write the store
-- journaled: its key, what it did (units debited past empty, or given
-- back), the sequence and era of the call that made it (lineage_read.lua),
-- and when its effect ends. An entry is applied only when the state here
-- does not hold it already, by the lineage its slot had when the call
-- began, and only while its effect lasts; then its request-id marker or
-- settlement record is restored too; a record of the restoring store's
-- keeps a restore sent again from applying anything twice. The calling
-- convention is in doc.go;
-- assemble.go puts arith.lua at --#arith, the settle blocks at --#settle,
-- the algorithm blocks at --#judge and the lineage blocks at --#lineage_*.
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local format, match, call = string.format, string.match, redis.call
local MAX_DEBT = 1125899906842624 -- 2^50 us, as in settle.lua

-- ARGV[1] is the era this call is stamped with: the restored writes
-- become this primary's own. ARGV[2] is how long a restore record lives
-- (ms). Then 14 per entry (doc.go). The last KEYS is the slot's lineage
-- key.
local era, record_ttl = ARGV[1], ARGV[2]
local entries = (#ARGV - 2) / 14

local time = call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

-- An entry whose effect has ended takes with it every earlier write of the
-- same key it follows: the state it left had refilled, or its window
-- closed, by now. gone[key] is the last such entry.
local gone, skeys = {}, {}
for i = 1, entries do
  skeys[i] = KEYS[3 * i - 2]
  if tonumber(ARGV[2 + 14 * (i - 1) + 10]) <= now then gone[skeys[i]] = i end
end
skeys[entries + 1] = KEYS[#KEYS]
local got = call('MGET', unpack(skeys))
local lkey, lin = KEYS[#KEYS], got[entries + 1]
skeys[entries + 1] = nil

-- The slot's lineage when the call began, which every entry is compared
-- with; restored[key] what the restoring store's record says it restored
-- on the key before (its era and last sequence: a restore whose reply was
-- lost, sent again, applies nothing twice); work and keep_for what the
-- call writes.
local lseq, lera, lbase, lprev, wseq
--#lineage_read
local restored, work, keep_for, applied, last = {}, {}, {}, {}, {}
for i = 1, entries do
  local key, aux, rec, o = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], 2 + 14 * (i - 1)
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
  local elast = tonumber(ARGV[o + 14])       -- the last sequence of the writes the entry stands for
  local state = got[i]
  if work[key] ~= nil then state = work[key] end
  if not restored[key] then
    local r, rs, re = call('GET', rec), false, false
    if r then rs, re = match(r, '^(%d+) (%x+)$') end
    restored[key] = {tonumber(rs) or 0, re or false}
  end
  local before = restored[key]
  local held = false
  if lera == eera then
    held = eseq <= lseq
  elseif lprev == eera then
    held = eseq <= lbase
  end
  if before[2] == eera and eseq <= before[1] then held = true end
  applied[i] = 0
  if not held and expires > now and i > (gone[key] or 0) then
    applied[i], last[key] = 1, {elast, eera, rec}
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
        --#keep_after
      end
      work[key], keep_for[key] = result, keep_after
    end
    -- The marker or record lives until ARGV[o + 13], an instant (us).
    local px = ceil((tonumber(ARGV[o + 13]) - now) / 1000)
    if aux_kind == 1 and px > 0 then
      call('SET', aux, '0', 'NX', 'PX', px)
    elseif aux_kind == 2 and px > 0 then
      call('SET', aux, ARGV[o + 12], 'PX', px)
    end
  end
end

-- The call's lineage, once, when it writes a state: its sequence is every
-- written key's. Then one command per key written, as the settle script
-- writes: its state with its TTL, or DEL for an idle identity; then the
-- record of what was restored there.
wseq = 0
if next(work) ~= nil then
  --#lineage_write
end
local reply, done = {}, {}
for i = 1, entries do
  local key = skeys[i]
  local s = work[key]
  if not done[key] then
    done[key] = true
    if s then
      call('SET', key, s, 'PX', ceil(keep_for[key] / 1000) + 1)
    elseif s == false then
      call('DEL', key)
    end
    local l = last[key]
    if l then call('SET', l[3], format('%d %s', l[1], l[2]), 'PX', record_ttl) end
  end
  local written = work[key] and wseq or 0
  reply[3 * i - 2], reply[3 * i - 1], reply[3 * i] = applied[i], written, written > 0 and keep_for[key] or 0
end
reply[3 * entries + 1] = now
return reply
