package store

import "time"

// Defaults shared by the Memory and Redis stores, so that both give the same
// answers unless configured otherwise.
const (
	// DefaultMaxReplays is how many times a request id that was admitted is
	// replayed (Allowed and Replayed, not debited) before a call carrying it
	// is judged afresh. gRPC's retry policy allows at most 5 attempts: one
	// admission and 4 replays cover every retry of one call, and one
	// admission never buys more than 1+DefaultMaxReplays calls with its id.
	DefaultMaxReplays = 4
	// DefaultReplayTTL is how long a request id is remembered after the
	// admission that created it, long enough for a client's retries with
	// backoff and short enough that reused ids cannot pile up quota.
	DefaultReplayTTL = 2 * time.Minute
)
