-- reads: state, now, delta, debited_at, period
-- sets:  new_state (a string; false deletes the key; nil leaves it)
--
-- Fixed window, a settle block: the Go mirror is algo.Settle's
-- debit and giveBack. state is "w c" or, for a calendar window, "w c k"
-- (fixed_window.lua). A debit counts in the current window past its rate
-- (at most 10^12 more); a give-back comes off the window debited
-- (debited_at) while it is the stored one, never below 0.
local kind = period > 0 and 0 or -period
local sw, sc, sk = false, 0, 0
if state then
  if kind == 0 then
    sw, sc = match(state, '^(%d+) (%d+)$')
  else
    sw, sc, sk = match(state, '^(%d+) (%d+) (%d+)$')
  end
  if sw then sw, sc, sk = tonumber(sw), tonumber(sc), tonumber(sk or 0) end
end
-- The window of an instant: floor(at / period), or its calendar number.
local at = delta > 0 and now or debited_at
local w = kind == 0 and floor(at / period) or calendar(at, kind)
local count = 0
if sw == w and sk == kind then count = sc end
if delta > 0 then
  count = count + min(delta, 1000000000000)
elseif sw == w and sk == kind then
  count = max(count + delta, 0)
else
  w = false -- the window debited is gone: nothing to give back
end
if w then
  if kind == 0 then new_state = format('%d %d', w, count) else new_state = format('%d %d %d', w, count, kind) end
end
