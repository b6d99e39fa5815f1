-- tollgate share: one member's report on a limit it shares with others, a
-- hash of member -> "demand granted expires_us". Members whose report is
-- older than their TTL are dropped first, by the server's clock; then the
-- member's max-min fair share of the limit is computed from the demands
-- held, and it is granted that share, less whatever the other members
-- still hold beyond what the limit leaves them. The calling convention is
-- in doc.go.
local call = redis.call
local key = KEYS[1]
local member, limit, demand, ttl, max_members = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])

local time = call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local expires = now + ttl

local all = call('HGETALL', key)
local others, held, last = {}, 0, expires
for i = 1, #all, 2 do
  local d, g, e = string.match(all[i + 1], '^(%d+) (%d+) (%d+)$')
  if not d or tonumber(e) <= now then
    call('HDEL', key, all[i])
  elseif all[i] ~= member then
    others[#others + 1] = tonumber(d)
    held = held + tonumber(g)
    last = math.max(last, tonumber(e))
  end
end
if #others >= max_members then
  return {0, 0, #others, now}
end

-- Water-filling from the smallest demand; the member comes after the
-- others of its own demand. Half of what the demands leave (spare) is
-- split among the members as headroom; the other half stays for members
-- that join or grow.
table.sort(others)
local n, left, fair, placed = #others + 1, limit, 0, false
local i = 1
for k = 1, n do
  local d = others[i]
  local is_member = not placed and (d == nil or d > demand)
  if is_member then
    d, placed = demand, true
  else
    i = i + 1
  end
  local share = math.min(d, math.floor(left / (n - k + 1)))
  if is_member then fair = share end
  left = left - share
end
fair = fair + math.floor(left / (2 * n))

local granted = math.max(0, math.min(fair, limit - held))
call('HSET', key, member, string.format('%d %d %d', demand, granted, expires))
call('PEXPIRE', key, math.ceil((last - now) / 1000) + 1)
return {granted, fair, n, now}
