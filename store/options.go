package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
)

// Defaults shared by the Memory and Redis stores, so that both give the same
// answers unless configured otherwise.
const (
	// defaultMaxReplays is how many times a request id that was admitted is
	// replayed (Allowed and Replayed, not debited) before a call carrying it
	// is judged afresh. gRPC's retry policy allows at most 5 attempts: one
	// admission and 4 replays cover every retry of one call, and one
	// admission never buys more than 1+defaultMaxReplays calls with its id.
	defaultMaxReplays = 4
	// defaultReplayTTL is how long a request id is remembered after the
	// admission that created it, long enough for a client's retries with
	// backoff and short enough that reused ids cannot pile up quota.
	defaultReplayTTL = 2 * time.Minute
)

// ErrInvalidOption is wrapped by the error NewRedis and NewMemory return
// when an option is given a value outside its range; the error names the
// option, the value and the range.
var ErrInvalidOption = errors.New("store: invalid option")

// invalidOption is the error of option given value: want says the range.
func invalidOption(option string, value any, want string) error {
	return fmt.Errorf("%w: %s(%v): want %s", ErrInvalidOption, option, value, want)
}

// RedisOption configures a Redis store (NewRedis).
type RedisOption interface{ applyRedis(*Redis) error }

// MemoryOption configures a Memory store (NewMemory).
type MemoryOption interface{ applyMemory(*Memory) error }

// Option configures either store: it is both a RedisOption and a
// MemoryOption, so that a Memory store standing in for Redis (in tests, or as
// a fail-local cap) can be given the same settings and give the same answers.
type Option interface {
	RedisOption
	MemoryOption
}

type redisOption func(*Redis)

func (o redisOption) applyRedis(r *Redis) error { o(r); return nil }

type memoryOption func(*Memory)

func (o memoryOption) applyMemory(m *Memory) error { o(m); return nil }

type replayOption func(*replays)

func (o replayOption) applyRedis(r *Redis) error   { o(&r.replays); return nil }
func (o replayOption) applyMemory(m *Memory) error { o(&m.replays); return nil }

// badOption is an option of either store given a value outside its range:
// the store's constructor returns its error.
type badOption struct{ err error }

func (o badOption) applyRedis(*Redis) error   { return o.err }
func (o badOption) applyMemory(*Memory) error { return o.err }

// WithMaxReplays sets how many times a request admitted with a RequestID is
// replayed (allowed again without a debit) for later requests carrying the
// same id (default 4). One admission thus buys at most 1+n
// calls with that id within the replay TTL. 0 turns request ids off: each
// request is judged and debited on its own. A negative n is an error.
func WithMaxReplays(n int) Option {
	if n < 0 {
		return badOption{invalidOption("WithMaxReplays", n, "0 (request ids off) or more")}
	}
	return replayOption(func(p *replays) { p.max = int64(n) })
}

// WithReplayTTL sets how long after an admission its RequestID keeps
// replaying (default 2 minutes). It is used in whole milliseconds,
// rounded up; d must be above 0. It should cover the caller's whole retry
// window: a retry arriving later is judged, and debited, afresh.
func WithReplayTTL(d time.Duration) Option {
	if d <= 0 {
		return badOption{invalidOption("WithReplayTTL", d, "a duration above 0")}
	}
	return replayOption(func(p *replays) { p.ttl = d })
}

// replays is the request-id configuration both stores share.
type replays struct {
	max int64         // replays per admitted id; 0 turns request ids off
	ttl time.Duration // how long an admitted id keeps replaying
}

func defaultReplays() replays { return replays{max: defaultMaxReplays, ttl: defaultReplayTTL} }

// ttlMs is the replay TTL as both stores apply it: whole milliseconds,
// rounded up, at least one.
func (p replays) ttlMs() int64 { return wholeMs(p.ttl) }

// replayTTLStep is the granularity of a ReplayTTL: rounded up to it, the
// ReplayTTLs of concurrent calls with deadlines of one length mostly agree,
// so the Redis store's batch script call sends their decisions' profile
// once (lua/doc.go), and a marker lives at most this much longer.
const replayTTLStep = 100 // ms

// ttlMsFor is how long the marker of an admission lives, in the units of
// ttlMs, for a request whose ReplayTTL is d: the replay TTL, or d rounded
// up to replayTTLStep when that is shorter and d is above 0.
func (p replays) ttlMsFor(d time.Duration) int64 {
	if d <= 0 || d >= p.ttl {
		return p.ttlMs()
	}
	return min((wholeMs(d)+replayTTLStep-1)/replayTTLStep*replayTTLStep, p.ttlMs())
}

// setReplayTTL is the ReplayTTL an AllowAll set's markers live by: the
// longest of its requests', so that no marker of the set is forgotten while
// a request still expects its retries; 0 (the store's) when one has none.
func setReplayTTL(reqs []tollgate.Request) time.Duration {
	var d time.Duration
	for _, req := range reqs {
		if req.ReplayTTL <= 0 {
			return 0
		}
		d = max(d, req.ReplayTTL)
	}
	return d
}

// wholeMs is d in whole milliseconds, rounded up, at least one.
func wholeMs(d time.Duration) int64 { return max(int64((d+time.Millisecond-1)/time.Millisecond), 1) }
