-- Token bucket. KEYS[1] is a hash: n = whole tokens, t = the microsecond up
-- to which refill has been credited. An absent key is a full bucket.
--
-- Refill credits whole tokens only and moves t forward by the time those
-- tokens took (rounded up to the microsecond), not to now: the fraction of a
-- token already earned is kept, and rounding loses under 1us per write.
-- Durations are computed from the state as it is stored after the call, so
-- that a later call, which starts from that same state, agrees with them to
-- the microsecond.
--
-- decide(c) judges cost c at now and, when admitted with c > 0, writes the
-- debit. decide(0) only reads: it reports the current remaining and reset.
-- Returns allowed (0|1), remaining, retry_after_us, reset_after_us.
local function decide(c)
  local s = redis.call('HMGET', KEYS[1], 'n', 't')
  local tokens, ts = capacity, now -- the stored state
  if s[1] then tokens, ts = tonumber(s[1]), tonumber(s[2]) end

  -- level tokens are available now, credited up to the microsecond credited.
  local level, credited = capacity, now
  local elapsed = now - ts
  if elapsed < 0 then elapsed = 0 end -- a clock that stepped back refills nothing
  if tokens < capacity and elapsed < ceil((capacity - tokens) * period / rate) then
    -- elapsed < time to full, so elapsed * rate < capacity * period + rate: exact.
    local earned = floor(elapsed * rate / period)
    level, credited = tokens + earned, ts + ceil(earned * period / rate)
  end

  local allowed, retry = 0, 0
  if c <= level then
    allowed, level = 1, level - c
    if c > 0 then tokens, ts = level, credited end
  else
    retry = ts + ceil((c - tokens) * period / rate) - now
  end
  local reset = 0
  if level < capacity then
    reset = ts + ceil((capacity - tokens) * period / rate) - now
  end
  if allowed == 1 and c > 0 then
    redis.call('HSET', KEYS[1], 'n', int(tokens), 't', int(ts))
    redis.call('PEXPIRE', KEYS[1], ttl_ms(reset)) -- absent means full
  end
  return allowed, level, retry, reset
end
