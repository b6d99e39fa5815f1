-- reads: state, now, delta, debited_at, rate, period
-- sets:  new_state (a string; false deletes the key; nil leaves it)
--
-- Sliding window, a settle block: the Go mirror is algo.Settle's
-- debit and giveBack. state is "w c p" (sliding_window.lua). A debit
-- counts in the current window, at most 2 * rate; a give-back comes off
-- the window debited (debited_at), whichever count holds it now, while it
-- is stored.
local sw, sc, sp = false, 0, 0
if state then
  sw, sc, sp = match(state, '^(%d+) (%d+) (%d+)$')
  if sw then sw, sc, sp = tonumber(sw), tonumber(sc), tonumber(sp) end
end
if delta > 0 then
  local w = floor(now / period)
  local cur, prev = 0, 0
  if sw == w then
    cur, prev = sc, sp
  elseif sw == w - 1 then
    prev = sc
  end
  new_state = format('%d %d %d', w, min(cur + delta, 2 * rate), prev)
elseif sw then
  local debited = floor(debited_at / period)
  if sw == debited then
    new_state = format('%d %d %d', sw, max(sc + delta, 0), sp)
  elseif sw == debited + 1 then
    new_state = format('%d %d %d', sw, sc, max(sp + delta, 0))
  end
end
