-- reads: lin (the lineage key's string, false when absent)
-- sets:  lseq, lera, lbase, lprev (the lineage: the sequence of the last
--        call that wrote on this slot with an era and that era, and when
--        that era took the slot over from another, the sequence the slot
--        had then and that era; 0 and false when there is none)
--
-- Lineage, a block. A call stamped with an era (the primary the store
-- verified it is writing to) that writes a state also writes its slot's
-- lineage key, one short string "seq era", or "seq era base prev" once a
-- later era took the slot over: seq is the call's sequence (at least one
-- more than the last call's, and at least the server's clock in us, so it
-- grows across the key's expiry too), era the stamp, and base and prev
-- where that era's calls began. A call's writes and its lineage replicate
-- together: Redis sends a script's writes as one MULTI/EXEC, which a
-- replica applies whole or not at all. The states themselves carry
-- nothing: a decision reads and writes only its algorithm's numbers.
lseq, lera, lbase, lprev = 0, false, false, false
if lin then
  local s, e, rest = match(lin, '^(%d+) (%x+)(.*)$')
  if s then
    lseq, lera = tonumber(s), e
    local b, p = match(rest, '^ (%d+) (%x+)$')
    if b then lbase, lprev = tonumber(b), p end
  end
end
