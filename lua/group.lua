-- tollgate group loop: judges the call's groups in order. Two groups on one
-- state key see each other's debits: with several groups the working state
-- is carried in work (and its TTL in keep_for), and nothing is written
-- until every group is judged. A single decision needs neither table.
local reply = {0, 0, 0, 0, 0, 0} -- sized for one group: no resize on the common path
local work, keep_for
if groups > 1 then work, keep_for = {}, {} end
local only_state, only_keep -- the single group's write
local all = true
for i = 1, groups do
  local key, o = KEYS[i], head + 5 * (i - 1)
  local alg = tonumber(ARGV[o + 1])
  local rate = tonumber(ARGV[o + 2])     -- events per period
  local period = tonumber(ARGV[o + 3])   -- microseconds
  local capacity = tonumber(ARGV[o + 4]) -- burst (token bucket, GCRA) or rate (windows)
  local c = tonumber(ARGV[o + 5])        -- 1 <= cost <= capacity; 0 on a replay
  if replay then c = 0 end
  -- state is the key's string, or false when absent.
  local state = got[i]
  if work and work[key] then state = work[key] end

  -- The algorithm's block judges cost c at now from state and sets allowed,
  -- remaining, retry and reset (us); when it admits c > 0 it also sets the
  -- new state, formatted with %d so that it is plain decimal integers
  -- whatever number formatting the Redis version applies to doubles (Lua's
  -- tostring turns a timestamp of 1.8e15 into exponent form), and keep, the
  -- microseconds from now that the state matters. The blocks are inline
  -- code, not functions, so that a decision creates no closure.
  local allowed, remaining, retry, reset = 0, 0, 0, 0
  local new_state, keep
