-- Fixed window. Windows are period-long, aligned to the server clock
-- (window number w = floor(now / period)), or calendar days, ISO weeks,
-- months or years in UTC when period is -1, -2, -3 or -4. KEYS[1] is the
-- string "w c" (period windows) or "w c k" (calendar windows of kind
-- k = -period): w = window number, c = count admitted in it. A count stored
-- for another window or another kind of window is ignored, so a late expiry
-- never counts into the next window.
do
  local w, left, kind = 0, 0, 0 -- left: microseconds until the next window
  if period > 0 then
    w = floor(now / period)
    left = (w + 1) * period - now
  else
    kind = -period
    local day = floor(now / 86400000000) -- days since 1970-01-01, a Thursday
    local next_day -- the day the next window starts
    if kind == 1 then
      w, next_day = day, day + 1
    elseif kind == 2 then
      w = floor((day + 3) / 7) -- weeks since Monday 1969-12-29
      next_day = w * 7 + 4
    else
      -- The civil date of day, then the day of the next month's or year's
      -- 1st: H. Hinnant's civil_from_days and days_from_civil, with years
      -- starting on 1 March so that February's length comes last.
      local z = day + 719468
      local era = floor(z / 146097)
      local doe = z - era * 146097
      local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
      local y = yoe + era * 400
      local mp = floor((5 * (doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))) + 2) / 153)
      local m = mp < 10 and mp + 3 or mp - 9
      if m <= 2 then y = y + 1 end
      local ny, nm = y + 1, 1
      if kind == 3 then
        w = y * 12 + m - 1
        if m < 12 then ny, nm = y, m + 1 end
      else
        w = y
      end
      if nm <= 2 then ny = ny - 1 end
      era = floor(ny / 400)
      yoe = ny - era * 400
      mp = nm > 2 and nm - 3 or nm + 9
      next_day = era * 146097 + yoe * 365 + floor(yoe / 4) - floor(yoe / 100)
        + floor((153 * mp + 2) / 5) - 719468
    end
    left = next_day * 86400000000 - now
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
end
