-- reads: state (the key's string, false when absent), now, rate, period,
--        c (the cost, 0 to only read)
-- sets:  allowed (0|1), remaining, retry, reset (us); when it admits c > 0,
--        new_state and keep (us from now that the state matters)
--
-- Sliding window, a judge block. Windows are period-long, aligned to
-- the server clock (window number w = floor(now / period)). The state is the
-- string "w c p": w = the window of the last admission, c = the count
-- admitted in it, p = the count admitted in window w - 1. So one key holds
-- both windows the estimate needs: in window w they are c and p, in window
-- w + 1 they are 0 and c, and later both are 0 (a late expiry never leaks a
-- count into a later window). An unreadable state reads as both 0.
--
-- The count over the last period is estimated as
--   previous * (period - elapsed) / period + current
-- with the previous window's share rounded up: a request of cost c is
-- admitted iff ceil(previous * (period - elapsed) / period) + current + c
-- <= rate, which is the exact comparison of the real estimate with rate - c
-- since both sides but the share are integers. A limit whose products
-- reach 2^53 has them computed by mulfloor and mulceil (arith.lua): exact
-- whatever the limit's size.
local w = floor(now / period)
local elapsed = now - w * period
local cur_n, prev_n = 0, 0 -- as stored, which may exceed rate
if state then
  local sw, sc, sp = match(state, '^(%d+) (%d+) (%d+)$')
  sw = tonumber(sw)
  if sw == w then
    cur_n, prev_n = tonumber(sc), tonumber(sp)
  elseif sw == w - 1 then
    prev_n = tonumber(sc)
  end
end
local prev_stored = prev_n
-- Counts above rate exist after a settlement past empty (up to 2 * rate) or
-- after the limit was lowered; capping them at 2 * rate
-- keeps every product in range. The previous count is written back as
-- stored, so that a limit raised again later sees it whole.
cur_n, prev_n = min(cur_n, 2 * rate), min(prev_n, 2 * rate)
local share = 0 -- the previous window's share, rounded up
if prev_n > 0 then
  share = mulceil and mulceil(prev_n, period - elapsed, period) or ceil(prev_n * (period - elapsed) / period)
end

if share + cur_n + c <= rate then
  allowed, cur_n = 1, cur_n + c
elseif cur_n <= rate - c then
  -- Fits later in this window, as the previous window's share decays to
  -- rate - c - cur_n (denied with cur_n <= rate - c implies prev_n > 0,
  -- and rate - c - cur_n < prev_n).
  local k = rate - c - cur_n
  retry = period - elapsed - (mulfloor and mulfloor(k, period, prev_n) or floor(k * period / prev_n))
else
  -- Only in the next window, once this window's count, now the previous
  -- one, has decayed to rate - c (at its very end if c = rate).
  local k = cur_n - (rate - c)
  retry = period - elapsed + (mulceil and mulceil(k, period, cur_n) or ceil(k * period / cur_n))
end

if cur_n > 0 then
  reset = 2 * period - elapsed
elseif prev_n > 0 then
  reset = period - elapsed
end
if allowed == 1 and c > 0 then
  -- Matters until the next window ends, where this window is the previous one.
  new_state, keep = format('%d %d %d', w, cur_n, prev_stored), reset
end
remaining = max(rate - cur_n - share, 0)
