-- tollgate arith: exact integer arithmetic for the algorithm blocks, on Lua's
-- doubles, and the calendar. lua/assemble.go puts it at a driver's --#arith line,
-- once per limit judged, after the locals rate, period, capacity and span:
-- the largest other count the blocks multiply by a period (a sliding
-- window's counts reach 2 * rate after a settlement past empty; a
-- settlement's final cost), 0 when none.
-- docs/limits.md has the proof in full.
--
-- For a limit with max(rate, capacity, span) * period < 2^53 every product the
-- blocks form is below 2^53 too, so a double holds it exactly and the
-- correctly rounded quotient's floor and ceiling are exact: the blocks
-- compute floor(a * b / d) and ceil(a * b / d) directly, as they always did.
-- Only for larger limits are muldiv, mulfloor and mulceil defined, and only
-- for calendar windows (period < 0) is calendar: a function is a closure
-- created on every call of the script, which costs an ordinary decision
-- several percent. The blocks use them when they are defined:
-- muldiv(a, b, d) is floor(a * b / d) and the remainder, mulfloor and
-- mulceil the floor and the ceiling, exactly, for integers 0 <= a, b < 2^52,
-- 0 < d < 2^50 whose quotient is below 2^52 (tollgate.Limit.Validate keeps
-- every call in range: counts up to 10^12 < 2^40, periods up to 366 days
-- < 2^45 us, refill times up to 100 years < 2^52 us).
--
-- A product below 2^53 is exact as it is. A larger one is estimated in
-- doubles (q within 2 of the true quotient), then the remainder
-- a * b - q * d is computed exactly from 26-bit limbs: every partial product
-- is below 2^52 and every partial sum below 2^53, and the remainder itself
-- lies in [-d, 3d), below 2^52. Moving q by the remainder's excess makes it
-- exact.
local muldiv, mulfloor, mulceil, calendar = false, false, false, false
if period < 0 then
  -- calendar(at, kind) is the number of the calendar window of kind 1 (day),
  -- 2 (ISO week), 3 (month) or 4 (year), in UTC, holding the instant at (us
  -- since the Unix epoch), and the instant the next one starts: the numbers
  -- are days since 1970-01-01 (a Thursday), weeks since Monday 1969-12-29,
  -- year * 12 + month - 1, and the year. Months and years go through the
  -- civil date: H. Hinnant's civil_from_days, then days_from_civil of the
  -- next window's first day, with years starting on 1 March so that
  -- February's length comes last.
  calendar = function(at, kind)
    local day = floor(at / 86400000000)
    if kind == 1 then return day, (day + 1) * 86400000000 end
    if kind == 2 then
      local w = floor((day + 3) / 7)
      return w, (w * 7 + 4) * 86400000000
    end
    local z = day + 719468
    local era = floor(z / 146097)
    local doe = z - era * 146097
    local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
    local y = yoe + era * 400
    local mp = floor((5 * (doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))) + 2) / 153)
    local m = mp < 10 and mp + 3 or mp - 9
    if m <= 2 then y = y + 1 end
    local w, ny, nm = y, y + 1, 1
    if kind == 3 then
      w = y * 12 + m - 1
      if m < 12 then ny, nm = y, m + 1 end
    end
    if nm <= 2 then ny = ny - 1 end
    era = floor(ny / 400)
    yoe = ny - era * 400
    mp = nm > 2 and nm - 3 or nm + 9
    local next_day = era * 146097 + yoe * 365 + floor(yoe / 4) - floor(yoe / 100)
      + floor((153 * mp + 2) / 5) - 719468
    return w, next_day * 86400000000
  end
elseif max(rate, capacity, span) * period >= 9007199254740992 then
  muldiv = function(a, b, d)
    local p = a * b
    local q = floor(p / d)
    if p < 9007199254740992 then return q, p - q * d end
    local S = 67108864 -- 2^26
    local a1, b1, q1, d1 = floor(a / S), floor(b / S), floor(q / S), floor(d / S)
    local a0, b0, q0, d0 = a - a1 * S, b - b1 * S, q - q1 * S, d - d1 * S
    -- The middle limb's difference first: its terms are each below 2^53,
    -- while the top limb times S alone may not be an exact double sum.
    local mid = (a1 * b0 + a0 * b1) - (q1 * d0 + q0 * d1)
    local r = ((a1 * b1 - q1 * d1) * S + mid) * S + (a0 * b0 - q0 * d0)
    while r < 0 do q, r = q - 1, r + d end
    while r >= d do q, r = q + 1, r - d end
    return q, r
  end

  mulfloor = function(a, b, d)
    local p = a * b
    if p < 9007199254740992 then return floor(p / d) end
    return (muldiv(a, b, d))
  end

  mulceil = function(a, b, d)
    local p = a * b
    if p < 9007199254740992 then return ceil(p / d) end
    local q, r = muldiv(a, b, d)
    if r > 0 then q = q + 1 end
    return q
  end
end
