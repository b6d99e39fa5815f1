package store

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// The Redis store's options and their defaults; WithJournal and
// WithExactness are in redis_failover.go, the options both stores take in
// options.go.

// defaultPrefix starts every key the Redis store writes, unless WithPrefix
// says otherwise.
const defaultPrefix = "tollgate:"

// Batching defaults (see WithBatching).
const (
	// defaultBatchSize is the most decisions one pipeline carries.
	defaultBatchSize = 128
	// defaultMaxPipelines is how many round trips one store keeps in flight
	// at once: two, so that Redis runs one batch of scripts while the next
	// is being written and the previous one's replies read.
	defaultMaxPipelines = 2
)

// defaultDenyCacheSize is how many denials a Redis store remembers unless
// WithDenyCache says otherwise: about 4096 × 140 bytes of memory.
const defaultDenyCacheSize = 4096

// maxDenyCacheTTL is the longest a denial is repeated from memory, however
// long Redis said to wait: a key deleted by hand, or a Redis that lost its
// data, is noticed within it.
const maxDenyCacheTTL = 10 * time.Second

// WithPrefix sets the string every key starts with (default "tollgate:"),
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

// maxClusterTags is the most hash tags WithClusterTags takes: one per
// Cluster slot.
const maxClusterTags = 16384

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
// (see Redis); n below 0 or above 16384 is an error.
// docs/deployment.md says how to choose n.
func WithClusterTags(n int) RedisOption {
	if n < 0 || n > maxClusterTags {
		return badOption{invalidOption("WithClusterTags", n, fmt.Sprintf("0 (off) to %d", maxClusterTags))}
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
// The defaults are 128 decisions and 2 pipelines. maxBatch or
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
// (rounded up to a multiple of denyWays; default 4096); 0
// turns the cache off, and a negative size is an error.
//
// While a denial Redis gave is in force, the store answers requests with the
// same Key and Limit and at least the same Cost from memory, with the
// RetryAfter and ResetAfter Redis would give for their Cost less the time
// since, or sends them to Redis when those cannot be known exactly. It never
// denies what Redis would admit; requests with a RequestID always go to
// Redis. Remaining is the remembered denial's. A denial is remembered at
// most 10 s, and when one runs out a single request asks Redis
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
