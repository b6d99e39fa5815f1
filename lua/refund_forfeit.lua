-- tollgate refund, after refund.lua's locals and arith.lua (still inside the
-- loop over the groups).

  -- A bucket (token bucket, GCRA) refills while the debit is out. Had it
  -- not been debited, it might have reached its capacity meanwhile and lost
  -- that refill; giving the whole cost back would then create quota. That
  -- can only happen when what the debit left, plus the cost, plus the
  -- refill since (and under one unit the debit left unseen) reaches the
  -- capacity: then the refill of the forfeit microseconds since the debit
  -- is not given back. In integers: e * rate > k * period with
  -- k = capacity - remaining - c - 1, that is e > floor(k * period / rate)
  -- (always when k < 0), with the products exact at every size.
  local forfeit = 0
  if alg <= 1 then
    local full = mulceil and mulceil(capacity, period, rate) or ceil(capacity * period / rate)
    local e = min(max(now - debited_at, 0), full)
    local k = capacity - remaining - c - 1
    if k < 0 or e > (mulfloor and mulfloor(k, period, rate) or floor(k * period / rate)) then
      forfeit = e
    end
  end

  -- The block gives c back to state (a string; absent state is already
  -- full, or holds nothing to give back) and sets new_state: the string to
  -- keep, false to delete the key (the state became that of an idle
  -- identity), nil to leave it.
  local new_state
  if state and c > 0 then
