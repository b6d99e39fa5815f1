-- reads: new_state (a state string of the algorithm's), now, era (the
--        call's stamp, '' for none), lseq, lera, lbase, lprev (as
--        lineage_read.lua set them for the state new_state replaces)
-- sets:  new_state (with its lineage), wseq (the sequence written, 0 when
--        the call has no stamp)
--
-- Lineage, a block (lineage_read.lua says what it holds). A write in the
-- era of the state keeps where that era began; a write in another era
-- starts one, recording the sequence and era it took the key over from; a
-- state without lineage starts afresh. A call without a stamp writes the
-- state without lineage.
wseq = 0
if era ~= '' then
  wseq = lseq + 1
  if wseq < now then wseq = now end
  if lera == era then
    if lbase then
      new_state = format('%s|%d %s %d %s', new_state, wseq, era, lbase, lprev)
    else
      new_state = format('%s|%d %s', new_state, wseq, era)
    end
  elseif lera then
    new_state = format('%s|%d %s %d %s', new_state, wseq, era, lseq, lera)
  else
    new_state = format('%s|%d %s', new_state, wseq, era)
  end
end
