-- reads: state (the key's whole string, false when absent)
-- sets:  state (the algorithm's part of it, false when absent); lseq, lera,
--        lbase, lprev (its lineage: the sequence of its last write and the
--        era that wrote it, and when that era took the key over from
--        another, the sequence the key had then and that era; 0 and false
--        when the state has none)
--
-- Lineage, a block. A state written by a call stamped with an era (the
-- primary the store verified it is writing to) ends in "|seq era", or
-- "|seq era base prev" once a later era took it over: seq is the key's
-- write sequence (at least one more than the last, and at least the
-- server's clock in us, so it grows across the key's expiry too), era is
-- the stamp of the primary that wrote it, and base and prev say where that
-- era's writes began. A state without it (written with no stamp) has no
-- lineage. The algorithm blocks read only the part before "|".
lseq, lera, lbase, lprev = 0, false, false, false
if state then
  local body, tail = match(state, '^([^|]*)|(.*)$')
  if body then
    state = body
    local s, e, rest = match(tail, '^(%d+) (%x+)(.*)$')
    if s then
      lseq, lera = tonumber(s), e
      local b, p = match(rest, '^ (%d+) (%x+)$')
      if b then lbase, lprev = tonumber(b), p end
    end
  end
end
