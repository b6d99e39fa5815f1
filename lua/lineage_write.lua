-- reads: lkey (the slot's lineage key), now, era (the call's stamp, not
--        ''), lseq, lera, lbase, lprev (as lineage_read.lua set them),
--        floor
-- sets:  wseq (the call's sequence); writes lkey
--
-- Lineage, a block (lineage_read.lua says what it holds), run once by a
-- call that wrote a state. A call in the era of the lineage keeps where
-- that era began; a call of another era starts one, recording the
-- sequence and era it took the slot over from; a slot without lineage
-- starts afresh. The key lives 30 minutes from the call that last set its
-- TTL, and the first call of each 10 minutes (by sequence) sets it again,
-- the others keep it (KEEPTTL writes no expiry: a write of the lineage
-- costs half as much): it outlives every call by at least 20 minutes,
-- longer than the store keeps a write to restore it (its window, at most
-- 10 minutes, after a primary that stopped answering, at most 10).
wseq = lseq + 1
if wseq < now then wseq = now end
local lineage
if lera == era then
  if lbase then
    lineage = format('%d %s %d %s', wseq, era, lbase, lprev)
  else
    lineage = format('%d %s', wseq, era)
  end
elseif lera then
  lineage = format('%d %s %d %s', wseq, era, lseq, lera)
else
  lineage = format('%d %s', wseq, era)
end
if lseq > 0 and floor(wseq / 600000000) == floor(lseq / 600000000) then
  call('SET', lkey, lineage, 'KEEPTTL')
else
  call('SET', lkey, lineage, 'PX', 1800000)
end
