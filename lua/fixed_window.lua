-- Fixed window. Windows are period-long, aligned to the server clock
-- (window number w = floor(now / period)). KEYS[1] is the string "w c":
-- w = window number, c = count admitted in it. A count stored for another
-- window is ignored, so a late expiry never counts into the next window.
do
  local w = floor(now / period)
  local left = (w + 1) * period - now -- microseconds until the next window
  local count = 0
  if state then
    local sw, sc = match(state, '^(%d+) (%d+)$')
    if tonumber(sw) == w then count = tonumber(sc) end
  end

  if count + c <= rate then
    allowed, count = 1, count + c
  else
    retry = left -- c <= rate always fits an empty window
  end
  if count > 0 then reset = left end
  if allowed == 1 and c > 0 then
    new_state, keep = format('%d %d', w, count), left
  end
  remaining = max(rate - count, 0)
end
