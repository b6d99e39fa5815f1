-- tollgate share: the members sharing one limit, each in a group (a region
-- and its replicas; a member alone is a group of its own), and what each
-- group holds. The calling convention, the fields and what the script
-- writes are in doc.go; the proof that the shares never add up to more
-- than the limit is in docs/multi-region.md.
--
-- KEYS[1] is the limit's hash: "#" -> "groups floor limit born", each
-- member "m<name>" -> "seq window share until demand group", each group of
-- a window "g<name>" -> "window bound used before until". KEYS[2] is the
-- mark of the store's memory on this slot: "born run_id".
local call, match, fmt, max, min, floor_of = redis.call, string.match, string.format, math.max, math.min, math.floor
local key, mark = KEYS[1], KEYS[2]
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local look = ARGV[1] == 'look'
local member, group, seq, groups, floor, limit, window, demand, used, hold, lease, keep, most
if look then
  window, lease, groups = tonumber(ARGV[2]), tonumber(ARGV[3]), 1
else
  member, group, seq = ARGV[2], ARGV[3], tonumber(ARGV[4])
  groups, floor, limit = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  window, demand, used, hold = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
  lease, keep, most = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
end
local mygroup = group
if mygroup == '' then mygroup = member end

-- The store's memory: a slot whose mark is gone, or was written by another
-- server process (a restart, a failover), may have forgotten grants still
-- in force; until a lease has passed since it found out, it grants no
-- group more than it holds.
local born, fresh, run, settling = now, false, nil, 0
if groups > 0 then
  run = match(call('INFO', 'server'), 'run_id:(%x+)')
  local b, r = match(call('GET', mark) or '', '^(%d+) (%x+)$')
  if b and r == run then born = tonumber(b) else fresh = true end
  settling = max(0, born + lease - now)
end

-- What the hash holds, expired entries set apart.
local all = call('HGETALL', key)
local config, live, gone, recs, drop = nil, {}, {}, {}, {}
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  local kind, name = string.sub(f, 1, 1), string.sub(f, 2)
  if f == '#' then
    config = v
  elseif kind == 'm' then
    local s, w, sh, u, d, g = match(v, '^(%d+) (%d+) (%d+) (%d+) (%d+) (%S*)$')
    if not s then
      drop[#drop + 1] = f
    else
      if g == '' then g = name end
      local m = {name = name, seq = tonumber(s), w = tonumber(w), s = tonumber(sh), u = tonumber(u), d = tonumber(d), g = g}
      if m.u > now then live[#live + 1] = m else gone[#gone + 1] = m; drop[#drop + 1] = f end
    end
  elseif kind == 'g' then
    local w, b, u, p, til = match(v, '^(%d+) (%d+) (%d+) (%d+) (%d+)$')
    if w and tonumber(til) > now then
      recs[name] = {w = tonumber(w), b = tonumber(b), used = tonumber(u), p = tonumber(p), u = tonumber(til)}
    else
      drop[#drop + 1] = f
    end
  else
    drop[#drop + 1] = f
  end
end

-- A member's ceiling in a window outlives its lease as its group's bound,
-- as the group may have used up to it: rec.b bounds the group's use of
-- window rec.w (rec.used is what it said it used), rec.p of the window
-- before.
local function fold(g, w, v, u)
  local r = recs[g]
  if not r then r = {w = w, b = 0, used = 0, p = 0, u = 0}; recs[g] = r end
  if w == r.w then
    r.b, r.used = max(r.b, v), max(r.used, u)
  elseif w == r.w - 1 then
    r.p = max(r.p, v)
  elseif w > r.w then
    if w == r.w + 1 then r.p = r.b else r.p = 0 end
    r.w, r.b, r.used = w, v, u
  else
    return
  end
  r.dirty = true
end

-- What a group's record says of the window asked about: its bound and its
-- use (of a group already in the next window, its bound of this one).
local function bound(r)
  if r.w == window then return r.b, r.used end
  if r.w == window + 1 then return r.p, r.p end
  return 0, 0
end

-- Every group but the caller's, with what it holds, asks and used.
local others, by, mine = {}, {}, nil
local mycount, mydemand, total = 0, demand or 0, 0
local function other(g)
  local o = by[g]
  if not o then o = {name = g, count = 0, demand = 0, used = 0, left = 0, members = 0}; by[g] = o; others[#others + 1] = o end
  return o
end
for _, m in ipairs(live) do
  if m.name == member then
    mine = m
  else
    total = total + 1
    local v = 0
    if m.w == window then v = m.s end
    if m.g == mygroup then
      mycount, mydemand = max(mycount, v), mydemand + m.d
    else
      local o = other(m.g)
      o.count, o.demand, o.members, o.left = max(o.count, v), o.demand + m.d, o.members + 1, max(o.left, m.u - now)
    end
  end
end

local function holdings(out)
  table.sort(others, function(a, b) return a.name < b.name end)
  for _, o in ipairs(others) do
    out[#out + 1] = o.name
    out[#out + 1] = o.members
    out[#out + 1] = o.count
    out[#out + 1] = o.demand
    out[#out + 1] = o.used
    out[#out + 1] = o.left
  end
  return out
end

if look then
  for g, r in pairs(recs) do
    local b, u = bound(r)
    local o = other(g)
    o.count, o.used = max(o.count, b), u
  end
  return holdings({0, 0, total, now, settling})
end

-- A refusal writes nothing.
local kborn = now
if groups > 0 and config then
  local head, cb = match(config, '^(%d+ %d+ %d+) (%d+)$')
  if head and head ~= fmt('%d %d %d', groups, floor, limit) then return {-1, 0, 0, now, 0} end
  kborn = tonumber(cb) or now
end
if seq > 0 and mine and mine.seq >= seq then return {-3, 0, 0, now, 0} end
if window > 0 then
  if mine and mine.w > window then return {-2, 0, 0, now, 0} end
  for _, m in ipairs(live) do
    if m.g ~= mygroup and m.w > window + 1 then return {-2, 0, 0, now, 0} end
  end
  for g, r in pairs(recs) do
    if g ~= mygroup and r.w > window + 1 then return {-2, 0, 0, now, 0} end
  end
end
if total >= most then return {0, 0, total, now, 0} end
for _, m in ipairs(gone) do
  if m.w > 0 then fold(m.g, m.w, m.s, 0) end
end
local myused = used
for g, r in pairs(recs) do
  local b, u = bound(r)
  if g == mygroup then
    mycount, myused = max(mycount, b), max(myused, u)
  else
    local o = other(g)
    o.count, o.used = max(o.count, b), u
  end
end
if groups > 0 and #others >= groups then return {-1, 0, 0, now, 0} end

-- Water-filling from the smallest ask, the caller's group after the others
-- of its own ask, each share an equal split of what is left rounded down,
-- or the ask if less; plus the caller's part of half the spare. Lua's
-- numbers are exact integers below 2^53: every figure here is one.
local function fair_of(pool, asks, own)
  table.sort(asks)
  local n, left, fair, placed, i = #asks + 1, pool, 0, false, 1
  for k = 1, n do
    local d = asks[i]
    local is_own = not placed and (d == nil or d > own)
    if is_own then d, placed = own, true else i = i + 1 end
    local share = min(d, floor_of(left / (n - k + 1)))
    if is_own then fair = share end
    left = left - share
  end
  return fair + floor_of(left / (2 * n))
end

-- Until the key has lived a lease, a group not heard of may simply not
-- have reported yet: it counts as asking an equal split of a rate (or as
-- much as the caller of a window), so that the first group to report does
-- not take what the others are about to ask.
local unknown = 0
if groups > 0 then unknown = groups - 1 - #others end
local young = groups > 0 and now < kborn + lease
local asks, fair, held = {}, 0, unknown * floor
for _, o in ipairs(others) do held = held + max(floor, o.count) end
if window == 0 then
  local pool = limit - groups * floor
  for _, o in ipairs(others) do asks[#asks + 1] = max(0, o.demand - floor) end
  if young then for _ = 1, unknown do asks[#asks + 1] = floor_of(pool / groups) end end
  fair = floor + fair_of(pool, asks, max(0, mydemand - floor))
else
  local base = max(floor, myused)
  local taken, want = base + unknown * floor, mydemand
  for _, o in ipairs(others) do
    taken = taken + max(floor, o.used)
    asks[#asks + 1] = o.demand
    want = want + o.demand
  end
  if young then for _ = 1, unknown do asks[#asks + 1] = mydemand; want = want + mydemand end end
  fair = min(limit, base + fair_of(min(max(0, limit - taken), 2 * want), asks, mydemand))
end
local granted = max(floor, min(fair, limit - held))
-- The members of a group decide on one store, each under its own share,
-- and the group is counted for the largest: a member whose grant comes
-- within 1/64 of what its group's others hold is granted that, so that
-- the members hold one share and the swings of the others' demands do not
-- spread them.
if groups > 0 and mycount > 0 and math.abs(granted - mycount) <= max(1, floor_of(mycount / 64)) then
  granted = max(floor, min(mycount, limit - held))
end
if settling > 0 then granted = min(granted, max(floor, hold)) end

-- The writes: the expired dropped; the caller's holding, at least what it
-- may still use; its group's use of the window; the configuration; the
-- key and the mark for as long as the longest of them.
for _, f in ipairs(drop) do call('HDEL', key, f) end
if window > 0 then
  if mine and mine.w < window then fold(mygroup, mine.w, mine.s, 0) end
  fold(mygroup, window, used, used)
end
call('HSET', key, 'm' .. member, fmt('%d %d %d %d %d %s', seq, window, max(granted, hold), now + lease, demand, group))
local last = now + lease
for _, m in ipairs(live) do last = max(last, m.u) end
for g, r in pairs(recs) do
  if r.dirty then
    r.u = max(r.u, now + keep)
    call('HSET', key, 'g' .. g, fmt('%d %d %d %d %d', r.w, r.b, r.used, r.p, r.u))
  end
  last = max(last, r.u)
end
if groups > 0 then call('HSET', key, '#', fmt('%d %d %d %d', groups, floor, limit, kborn)) end
local ttl = math.ceil((last - now) / 1000) + 1
call('PEXPIRE', key, ttl)
if groups > 0 then
  local need = max(ttl, 86400000)
  if fresh then
    call('SET', mark, fmt('%d %s', born, run), 'PX', need)
  elseif call('PTTL', mark) < need / 2 then
    call('PEXPIRE', mark, need)
  end
end
return holdings({granted, fair, total + 1, now, settling})
