// Package lua holds tollgate's Redis scripts, one per algorithm, embedded
// from the *.lua files beside this one and exposed as go-redis Script values
// (EVALSHA first, EVAL once on NOSCRIPT).
//
// Every script has the same calling convention, so that the store can build
// one argument list for any algorithm. A decision without a request id sends
// one key and four arguments; with one, two keys and six:
//
//	KEYS[1]  state key       {tag}:<alg>       (a string of decimal integers)
//	KEYS[2]  request-id key  {tag}:<alg>:r:<h> (only with a request id)
//
//	ARGV[1]  rate             events per period (integer > 0)
//	ARGV[2]  period           microseconds (integer > 0)
//	ARGV[3]  capacity         burst for token bucket and GCRA; rate for windows
//	ARGV[4]  cost             integer, 1 ≤ cost ≤ capacity
//	ARGV[5]  max replays      replays allowed per admitted id (only with a request id)
//	ARGV[6]  replay ttl       milliseconds the request-id key lives (only with a request id)
//
// Both keys share one hash tag, so a decision touches a single Cluster slot.
// The reply is an array of five integers:
//
//	{allowed (0|1), remaining, retry_after_us, reset_after_us, replayed (0|1)}
//
// The clock is redis.call('TIME'); nothing time-related comes from ARGV.
//
// A replayed request id answers {1, remaining, 0, reset_after_us, 1} with the
// identity's current remaining, without a debit.
//
// A script must run once per decision: a client that re-sent it after a
// lost reply would debit twice. The store sends it as a command go-redis
// never retries (see store.Redis); the script itself keeps no record of
// earlier runs.
//
// Each script is prelude.lua (arguments, clock, one read of every key,
// the request-id check), the algorithm's own file (its state and its
// decision, an inline block judging cost c) and main.lua (the writes and the
// reply), joined, so the request-id handling is written once.
// Package internal/algo mirrors each algorithm in Go, bit for bit.
//
// What Redis spends on a script is mostly per redis.call and per key
// created, so a decision makes as few calls as it can: TIME, one GET (MGET
// with a request id), and on admission one SET ... PX per key it
// writes. State is a short string ("<int> <int>"), not a hash, so that one
// command writes it with its TTL.
package lua
