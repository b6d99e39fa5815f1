-- reads: holdkey (the identity's mean hold time key), held (µs the released
--   seat was held, > 0), hold_ttl (ms the mean is kept)
-- sets: nothing; writes holdkey: an exponential mean, each hold weighing 1/8
--   (the first is taken as it is)
local mean = tonumber(call('GET', holdkey))
if mean then
  mean = mean - math.floor(mean / 8) + math.floor(held / 8)
else
  mean = held
end
call('SET', holdkey, string.format('%d', mean), 'PX', hold_ttl)
