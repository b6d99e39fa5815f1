// Package lua holds tollgate's Redis scripts, embedded from the *.lua files
// beside this one. It exports their sources and SHA-1 hashes only (Source,
// Hash), for SCRIPT LOAD or inspection: the store sends them itself, as
// commands go-redis never re-sends (see store.Redis), because a decision
// re-sent after a lost reply would be debited twice.
//
// # Decide
//
// One call judges n ≥ 1 groups, each a (state key, limit, cost), in order,
// and debits them all only when every group admits. Two groups on one
// state key see each other's debits. All the keys of a call must be on one
// Cluster slot (on a single node any keys may be declared together):
//
//	KEYS[i]      state key of group i    {tag}:<alg>        (a string of decimal integers)
//	KEYS[n+i]    request-id marker of i  {tag}:<alg>:r:<h>  (only in mode > 0)
//
//	ARGV[1]      mode        -1 peek: judge, write nothing, no markers
//	                          0 decide, no request id
//	                         m > 0 decide with a request id, replayed at most m times
//	ARGV[2]      replay TTL  milliseconds a marker lives after an admission (only when m > 0)
//	then, from ARGV[h+1] (h = 2 with a request id, else 1), five per group:
//	             algorithm (0 token bucket, 1 GCRA, 2 sliding window, 3 fixed
//	             window: tollgate.Algorithm's values), rate (events per
//	             period), period (microseconds; for a calendar fixed window
//	             -1 day, -2 week, -3 month, -4 year), capacity (burst for the
//	             buckets, rate for the windows), cost (1 ≤ cost ≤ capacity):
//	             internal/algo.ParamsOf's numbers
//
// The reply is five integers per group, then the server time (µs):
//
//	{allowed (0|1), remaining, retry_after_us, reset_after_us, replayed (0|1)} × n, now_us
//
// When one group denies, every group answers allowed 0 (those that would
// have been admitted with retry_after 0) and nothing is written. When every
// marker of the call holds an earlier admission with replays left, the call
// replays: each group answers {1, remaining, 0, reset_after_us, 1} with
// its identity's current state and nothing is debited. An admission writes
// each state with SET … PX (no longer than it matters) and each marker with
// SET … PX ARGV[2]; a denied call leaves no marker. Every argument costs
// Redis a little, so a call without a request id sends no TTL.
//
// # Batch
//
// One call judges n ≥ 1 independent decisions, in order, each exactly as
// its own decide call of one group would be (same modes, same replies,
// same writes), at one server time: a decision on a key sees the writes
// of the decisions before it in the call. What a decide call of one group
// sends besides its keys (mode, replay TTL, algorithm, rate, period,
// capacity, cost) is its profile, and the decisions of a call usually share
// very few (one rule's limit, cost 1, with or without a request id), so
// each distinct profile is sent and checked once, first, and each decision
// sends only the place of its profile in that list:
//
//	KEYS         per decision: state key, then its marker when its mode > 0
//
//	ARGV[1]      P ≥ 1, the number of profiles
//	ARGV[2..7P+1] seven per profile: mode, replay TTL (ignored unless
//	             mode > 0; send 0), algorithm, rate, period, capacity, cost,
//	             as in the decide call
//	ARGV[7P+1+d] decision d's profile, 1 to P, in decimal ("1", "2", ...)
//
// When the decisions share few profiles (the store's rule: fewer than two
// decisions per profile), the profiles and references cost more than they
// save, and the call sends each decision's profile in turn instead, inline:
//
//	ARGV[1]      0
//	ARGV[2..]    per decision, its decide call's ARGV: mode, replay TTL
//	             (only when mode > 0), algorithm, rate, period, capacity, cost
//
// The reply is each decision's answer in turn, then the server time (µs).
// An answer holds what the decide call's five integers would, compactly
// (BatchDecision decodes it): a decision that could not be judged answers
// allowed alone (-1 or -2); one that was judged answers a code,
// remaining*4 + allowed*2 + replayed, then its reset, then, only when
// denied, its retry. An admitted decision, the usual one, answers two
// integers: each costs Redis a conversion and the client a parse, and five
// cost the script 2–6% more of its time. Nothing is written until every argument has been
// read: a call whose ARGV does not make P whole profiles and decisions (or,
// inline, whole decisions), whose profile has no mode (an integer ≥ -1),
// whose decision names no profile of the call, or whose KEYS are not those
// of its decisions, is an error and writes nothing. A decision whose
// numbers are out of range (its profile's: the limit, TTL or cost, so every
// decision of that profile, and only those) answers allowed -1, and one
// whose write Redis refuses (INCR of a marker holding a number that is not
// an integer) answers allowed -2, with nothing of it written; the other
// decisions of the call are judged as usual. With profiles a decision
// costs Redis one argument, against the six or seven of its own decide
// call. The keys of a call must be on one Cluster slot, so only a single
// node (or Sentinel) batches decisions of unrelated identities this way.
// The script loops over its decisions, so the store bounds a call to 128
// of them.
//
// # Refund
//
// A Redis Cluster cannot decide keys of several slots in one call, so a set
// spread over slots is decided one slot per call, and the debits of the
// slots that admitted are given back when another slot denied:
//
//	KEYS[i]      state key of group i, as in the decide call
//	KEYS[n+i]    marker of group i (only when ARGV[1] is 1: deleted)
//	KEYS[last]   nonce key on the same slot, {tag}:n:<nonce>
//
//	ARGV[1]      1 when the decide call set markers, else 0
//	ARGV[2]      the nonce key's TTL, milliseconds
//	ARGV[3]      now_us of the decide call's reply
//	ARGV[4+6(i-1)..]  group i: algorithm, rate, period, capacity, cost, and
//	             the remaining the decide call answered for it
//
// It replies 1, or 0 when the nonce key already existed (a re-sent refund,
// which gives nothing back twice). A refund never creates quota: a window
// is credited only while the window debited is still stored; a bucket at
// most up to its capacity, less the refill since the debit when the bucket
// could have filled up meanwhile.
//
// # Files
//
// The batch script is batch.lua (arguments, clock, one MGET, the loop's
// head), arith.lua, the four algorithm blocks and batch_end.lua (each
// decision's writes and reply). The decide script is prelude.lua
// (arguments, clock, one MGET of every key, the request-id check),
// group.lua (the loop over the groups),
// arith.lua (exact products and the calendar, defined only for the groups
// that need them), the four algorithm blocks (inline chunks deciding cost c
// from state, chosen by the group's algorithm) and main.lua (the reply and
// the writes). The refund script is refund.lua, arith.lua,
// refund_forfeit.lua, the four refund_*.lua blocks and refund_end.lua. The
// clock is always redis.call('TIME').
//
// What Redis spends on a script is mostly per redis.call and per key
// created, so a single decision makes as few calls as it can: TIME, one
// MGET, and on admission one SET … PX per key it writes. State is a short
// string ("<int> <int>"), not a hash, so that one command writes it with
// its TTL. Package internal/algo mirrors each algorithm in Go, bit for bit.
package lua
