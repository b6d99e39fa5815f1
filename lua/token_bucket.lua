-- Token bucket. KEYS[1] is a hash: n = whole tokens, t = the microsecond up
-- to which refill has been credited. An absent key is a full bucket.
--
-- Refill credits whole tokens only and moves t forward by the time those
-- tokens took (rounded up to the microsecond), not to now: the fraction of a
-- token already earned is kept, and rounding loses under 1us per write.
--
-- decide(c) judges cost c at now and, when admitted with c > 0, writes the
-- debit. decide(0) only reads: it reports the current remaining and reset.
-- Returns allowed (0|1), remaining, retry_after_us, reset_after_us.
local function decide(c)
  local s = redis.call('HMGET', KEYS[1], 'n', 't')
  local tokens, ts = capacity, now
  if s[1] then
    tokens, ts = tonumber(s[1]), tonumber(s[2])
    local elapsed = now - ts
    if elapsed < 0 then elapsed = 0 end -- a clock that stepped back refills nothing
    if tokens >= capacity or elapsed >= ceil((capacity - tokens) * period / rate) then
      tokens, ts = capacity, now
    else
      -- elapsed < time to full, so elapsed * rate < capacity * period + rate: exact.
      local earned = floor(elapsed * rate / period)
      tokens = tokens + earned
      ts = ts + ceil(earned * period / rate)
    end
  end

  local allowed, retry = 0, 0
  if c <= tokens then
    allowed, tokens = 1, tokens - c
  else
    retry = ts + ceil((c - tokens) * period / rate) - now
  end
  local reset = 0
  if tokens < capacity then
    reset = ts + ceil((capacity - tokens) * period / rate) - now
  end
  if allowed == 1 and c > 0 then
    redis.call('HSET', KEYS[1], 'n', int(tokens), 't', int(ts))
    redis.call('PEXPIRE', KEYS[1], ttl_ms(reset)) -- absent means full
  end
  return allowed, tokens, retry, reset
end
