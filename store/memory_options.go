package store

import "time"

// The Memory store's options and their defaults; the options both stores
// take are in options.go.

// defaultMaxKeys is the bound on entries a Memory store holds unless
// WithMaxKeys says otherwise: about a million identities and request ids.
const defaultMaxKeys = 1 << 20

// WithClock sets the clock the store reads (default time.Now), for tests and
// simulations; it must be safe for concurrent use. Only its microseconds
// since the Unix epoch are used. A nil clock is an error.
func WithClock(now func() time.Time) MemoryOption {
	if now == nil {
		return badOption{invalidOption("WithClock", "nil", "a clock")}
	}
	return memoryOption(func(m *Memory) { m.clock = now })
}

// WithMaxKeys bounds how many entries (identity states and remembered
// request ids) the store holds (default 1<<20, 1,048,576); n below 1 is an
// error. When a new entry would exceed the bound, the entry closest to
// expiry in its shard is dropped first: a bucket about to be full again, a window about to end, a
// request id about to be forgotten. Its identity then starts afresh (a full
// bucket, an empty window; an id judged anew), so a store too small for its
// traffic admits a little more than its limits rather than grow.
func WithMaxKeys(n int) MemoryOption {
	if n < 1 {
		return badOption{invalidOption("WithMaxKeys", n, "1 or more")}
	}
	return memoryOption(func(m *Memory) { m.maxKeys = n })
}
