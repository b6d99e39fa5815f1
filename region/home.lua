-- tollgate region home: the regions sharing one global limit for one
-- identity. KEYS[1] is a hash of region -> "window share until demand used
-- previous" (decimal integers; until in µs on this server's clock,
-- previous the region's share in the window before) and "#" ->
-- "regions floor limit", what every region must agree on.
--
-- ARGV[1] = 'look': reply {now, region, value, ...}, writing nothing.
-- ARGV[1] = 'report', then region, regions, floor, limit, window, demand,
-- used, want, keep (µs): drop the holdings whose until has passed; count
-- what the other regions hold in the window (their share, at least the
-- floor; a region with no holding, its floor); grant
-- max(floor, min(want, limit - that)); store the holding until now + keep;
-- keep the key as long as its last holding. Reply {granted, now, region,
-- value, ...} of the others, {-1, now} when the report disagrees with "#"
-- or more regions hold than it says, {-2, now} when it is for a window past.
local call = redis.call
local key = KEYS[1]
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local all = call('HGETALL', key)

if ARGV[1] == 'look' then
  local out = {now}
  for i = 1, #all, 2 do
    if all[i] ~= '#' then
      out[#out + 1] = all[i]
      out[#out + 1] = all[i + 1]
    end
  end
  return out
end

local region, regions, floor, limit = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local window, demand, used, want, keep = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local config = string.format('%d %d %d', regions, floor, limit)

local have = call('HGET', key, '#')
if have and have ~= config then return {-1, now} end

local held, seen, last, mine = 0, 0, now + keep, nil
local out = {0, now}
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  if f ~= '#' then
    local w, s, u, _, _, p = string.match(v, '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
    if not w or tonumber(u) <= now then
      call('HDEL', key, f)
    elseif f == region then
      mine = {tonumber(w), tonumber(s), tonumber(p)}
    else
      w, s, p = tonumber(w), tonumber(s), tonumber(p)
      if w > window + 1 then return {-2, now} end
      local in_window = floor
      if w == window then in_window = s elseif w == window + 1 then in_window = p end
      held = held + math.max(floor, in_window)
      seen = seen + 1
      last = math.max(last, tonumber(u))
      out[#out + 1] = f
      out[#out + 1] = v
    end
  end
end
if seen >= regions then return {-1, now} end
if mine and mine[1] > window then return {-2, now} end

local granted = math.max(floor, math.min(want, limit - held - (regions - 1 - seen) * floor))
local previous = floor
if mine and mine[1] == window then previous = mine[3] elseif mine and mine[1] == window - 1 then previous = mine[2] end
call('HSET', key, region, string.format('%d %d %d %d %d %d', window, granted, now + keep, demand, used, previous), '#', config)
call('PEXPIRE', key, math.ceil((last - now) / 1000) + 1)
out[1] = granted
return out
