package store

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate"
)

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

// DefaultPrefix starts every key the Redis store writes, unless WithPrefix
// says otherwise.
const DefaultPrefix = "tollgate:"

// Batching defaults (see WithBatching).
const (
	// DefaultBatchSize is the most decisions one pipeline carries.
	DefaultBatchSize = 128
	// DefaultMaxPipelines is how many round trips one store keeps in flight
	// at once: two, so that Redis runs one batch of scripts while the next
	// is being written and the previous one's replies read.
	DefaultMaxPipelines = 2
)

// DefaultDenyCacheSize is how many denials a Redis store remembers unless
// WithDenyCache says otherwise: about 4096 × 140 bytes of memory.
const DefaultDenyCacheSize = 4096

// MaxDenyCacheTTL is the longest a denial is repeated from memory, however
// long Redis said to wait: a key deleted by hand, or a Redis that lost its
// data, is noticed within it.
const MaxDenyCacheTTL = 10 * time.Second

// DefaultMaxKeys is the bound on entries a Memory store holds unless
// WithMaxKeys says otherwise: about a million identities and request ids.
const DefaultMaxKeys = 1 << 20

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
// same id (default DefaultMaxReplays). One admission thus buys at most 1+n
// calls with that id within the replay TTL. 0 turns request ids off: each
// request is judged and debited on its own. A negative n is an error.
func WithMaxReplays(n int) Option {
	if n < 0 {
		return badOption{invalidOption("WithMaxReplays", n, "0 (request ids off) or more")}
	}
	return replayOption(func(p *replays) { p.max = int64(n) })
}

// WithReplayTTL sets how long after an admission its RequestID keeps
// replaying (default DefaultReplayTTL). It is used in whole milliseconds,
// rounded up; d must be above 0. It should cover the caller's whole retry
// window: a retry arriving later is judged, and debited, afresh.
func WithReplayTTL(d time.Duration) Option {
	if d <= 0 {
		return badOption{invalidOption("WithReplayTTL", d, "a duration above 0")}
	}
	return replayOption(func(p *replays) { p.ttl = d })
}

// WithPrefix sets the string every key starts with (default DefaultPrefix),
// to share one Redis between applications or environments. The prefix must
// not contain "{" or "}": the hash tag that keeps a decision's keys on one
// Cluster slot must be the first braces in every key. A prefix with braces
// is an error.
func WithPrefix(prefix string) RedisOption {
	if strings.ContainsAny(prefix, "{}") {
		return badOption{invalidOption("WithPrefix", fmt.Sprintf("%q", prefix), `a prefix without "{" or "}", which would move the Cluster hash tag`)}
	}
	return redisOption(func(r *Redis) { r.prefix = prefix })
}

// MaxClusterTags is the most hash tags WithClusterTags takes: one per
// Cluster slot.
const MaxClusterTags = 16384

// WithClusterTags turns on the tagged key layout: every identity's keys go
// behind one of n hash tags, chosen by a hash of the identity, instead of
// a tag of its own. Identities behind one tag share a Cluster slot, so on
// a ClusterClient concurrent decisions behind one tag share one batch
// script call, as every decision does on a single node; a Cluster then
// moves a tag's identities together when it rebalances. The n tags are
// spread evenly over the slot space (tag k is on a slot in its n-th of
// it), so the default assignment of slots to primaries gives each primary
// n / primaries of them. Every replica sharing the state must use the same
// n: changing n, or turning the layout on or off, moves every identity to
// a key it never had (its state starts afresh, full buckets and empty
// windows). n of 0, the default, keeps each identity on a tag of its own
// (see Redis); n below 0 or above MaxClusterTags is an error.
// docs/deployment.md says how to choose n.
func WithClusterTags(n int) RedisOption {
	if n < 0 || n > MaxClusterTags {
		return badOption{invalidOption("WithClusterTags", n, fmt.Sprintf("0 (off) to %d", MaxClusterTags))}
	}
	return redisOption(func(r *Redis) { r.tagCount = n })
}

// WithBatching sets how concurrent decisions share round trips. A decision
// that finds a free round trip (fewer than maxPipelines in flight) and
// nobody waiting goes to Redis at once, alone, as it would without
// batching; the others wait, and as soon as a round trip ends, everything
// waiting, up to maxBatch decisions, goes in the next one as a single
// pipeline of EVALSHA. So a lone caller never waits for a batch to fill,
// and under load one write, one read and one Redis wake-up serve many
// decisions. On a ClusterClient each primary has round trips of its own, so
// a primary that is slow or unreachable holds up only the decisions whose
// keys it serves.
//
// The defaults are DefaultBatchSize and DefaultMaxPipelines. maxBatch or
// maxPipelines of 0 turns batching off: every decision is its own round
// trip (EVALSHA, and EVAL once on NOSCRIPT), as go-redis's AutoPipeliner
// needs when the store is given one as its client. A negative value is an
// error.
func WithBatching(maxBatch, maxPipelines int) RedisOption {
	if maxBatch < 0 || maxPipelines < 0 {
		return badOption{invalidOption("WithBatching", fmt.Sprintf("%d, %d", maxBatch, maxPipelines), "0 (off) or more for each")}
	}
	return redisOption(func(r *Redis) {
		if maxBatch == 0 || maxPipelines == 0 {
			r.batch = nil
			return
		}
		r.batch = &batcher{maxBatch: maxBatch, maxPipelines: maxPipelines}
	})
}

// WithBatchScript sets whether a batch of concurrent decisions (see
// WithBatching) goes to Redis as one batch script call (on, the default)
// or as a pipeline of one decide call each (off). One call reads the clock
// once and runs one script for the whole batch, which costs Redis much less
// per decision; each decision is still judged, written and answered on its
// own, in order, as its own call would be. Concurrent seat calls
// (AcquireSeat, RenewSeat, ReleaseSeat, SeatsInUse) are likewise folded
// into one seat script call (off: one each). On a *redis.Client (a single
// node, or Sentinel through NewFailoverClient) a batch is one call; on a
// ClusterClient in the tagged layout (WithClusterTags), whose identities
// share a few slots, a batch's decisions on one slot share a call, as one
// script call can declare keys of one slot only. Elsewhere (a ClusterClient
// without tags, a Ring) each decision keeps its own call, still pipelined
// with its batch.
func WithBatchScript(on bool) RedisOption {
	return redisOption(func(r *Redis) { r.noBatchScript = !on })
}

// WithDenyCache sets how many denials the store remembers in process
// (rounded up to a multiple of denyWays; default DefaultDenyCacheSize); 0
// turns the cache off, and a negative size is an error.
//
// While a denial Redis gave is in force, the store answers requests with the
// same Key and Limit and at least the same Cost from memory, with the
// RetryAfter and ResetAfter Redis would give for their Cost less the time
// since, or sends them to Redis when those cannot be known exactly. It never
// denies what Redis would admit; requests with a RequestID always go to
// Redis. Remaining is the remembered denial's. A denial is remembered at
// most MaxDenyCacheTTL, and when one runs out a single request asks Redis
// for the identity while the others wait for its answer. docs/store.md has
// the reasoning.
func WithDenyCache(size int) RedisOption {
	if size < 0 {
		return badOption{invalidOption("WithDenyCache", size, "0 (off) or more")}
	}
	return redisOption(func(r *Redis) {
		r.deny = nil
		if size > 0 {
			r.deny = newDenyCache(size)
		}
	})
}

// WithLogger sets where the Redis store logs what an operator must act on,
// such as a Redis that does not persist long limits (default
// slog.Default()); nil is an error.
func WithLogger(l *slog.Logger) RedisOption {
	if l == nil {
		return badOption{invalidOption("WithLogger", "nil", "a logger")}
	}
	return redisOption(func(r *Redis) { r.persistence.log = l })
}

// WithMeterProvider sets where the Redis store exports its gauges, such as
// telemetry.MetricUnpersisted (default otel.GetMeterProvider()); nil is an error.
func WithMeterProvider(mp metric.MeterProvider) RedisOption {
	if mp == nil {
		return badOption{invalidOption("WithMeterProvider", "nil", "a meter provider")}
	}
	return redisOption(func(r *Redis) { r.persistence.meter = mp })
}

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
// request ids) the store holds (default DefaultMaxKeys); n below 1 is an
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

// replays is the request-id configuration both stores share.
type replays struct {
	max int64         // replays per admitted id; 0 turns request ids off
	ttl time.Duration // how long an admitted id keeps replaying
}

func defaultReplays() replays { return replays{max: DefaultMaxReplays, ttl: DefaultReplayTTL} }

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
