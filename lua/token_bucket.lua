-- Token bucket. KEYS[1] is the string "n t": n = whole tokens, t = the
-- microsecond up to which refill has been credited. An absent key is a full
-- bucket.
--
-- Refill credits whole tokens only and moves t forward by the time those
-- tokens took (rounded up to the microsecond), not to now: the fraction of a
-- token already earned is kept, and rounding loses under 1us per write.
-- Durations are computed from the state as it is stored after the call, so
-- that a later call, which starts from that same state, agrees with them to
-- the microsecond.
do
  local tokens, ts = capacity, now -- the stored state
  if state then
    local n, t = match(state, '^(%d+) (%d+)$')
    tokens, ts = tonumber(n), tonumber(t)
  end

  -- level tokens are available now, credited up to the microsecond credited.
  local level, credited = capacity, now
  local elapsed = now - ts
  if elapsed < 0 then elapsed = 0 end -- a clock that stepped back refills nothing
  if tokens < capacity and elapsed < ceil((capacity - tokens) * period / rate) then
    -- elapsed < time to full, so elapsed * rate < capacity * period + rate: exact.
    local earned = floor(elapsed * rate / period)
    level, credited = tokens + earned, ts + ceil(earned * period / rate)
  end

  if c <= level then
    allowed, level = 1, level - c
    if c > 0 then tokens, ts = level, credited end
  else
    retry = ts + ceil((c - tokens) * period / rate) - now
  end
  if level < capacity then
    reset = ts + ceil((capacity - tokens) * period / rate) - now
  end
  if allowed == 1 and c > 0 then
    new_state, keep = format('%d %d', tokens, ts), reset
  end
  remaining = level
end
