-- reads: state (the key's string, false when absent), now, rate, period,
--        c (the cost, 0 to only read)
-- sets:  allowed (0|1), remaining, retry, reset (us); when it admits c > 0,
--        new_state and keep (us from now that the state matters)
--
-- Fixed window, a judge block. Windows are period-long, aligned to
-- the server clock (window number w = floor(now / period)), or calendar days,
-- ISO weeks, months or years in UTC when period is -1, -2, -3 or -4
-- (arith.lua's calendar numbers them and finds their ends). The state is the
-- string "w c" (period windows) or "w c k" (calendar windows of kind
-- k = -period): w = window number, c = count admitted in it. A count stored for
-- another window or another kind of window is ignored, so a late expiry never
-- counts into the next window.
local w, left, kind = 0, 0, 0 -- left: microseconds until the next window
if period > 0 then
  w = floor(now / period)
  left = (w + 1) * period - now
else
  kind = -period
  local next_start
  w, next_start = calendar(now, kind)
  left = next_start - now
end
local count = 0
if state then
  if kind == 0 then
    local sw, sc = match(state, '^(%d+) (%d+)$')
    if tonumber(sw) == w then count = tonumber(sc) end
  else
    local sw, sc, sk = match(state, '^(%d+) (%d+) (%d+)$')
    if tonumber(sw) == w and tonumber(sk) == kind then count = tonumber(sc) end
  end
end

if count + c <= rate then
  allowed, count = 1, count + c
else
  retry = left -- c <= rate always fits an empty window
end
if count > 0 then reset = left end
if allowed == 1 and c > 0 then
  if kind == 0 then
    new_state = format('%d %d', w, count)
  else
    new_state = format('%d %d %d', w, count, kind)
  end
  keep = left
end
remaining = max(rate - count, 0)
