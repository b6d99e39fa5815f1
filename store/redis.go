package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
)

// DefaultPrefix starts every key the Redis store writes, unless WithPrefix
// says otherwise.
const DefaultPrefix = "tollgate:"

// DefaultRetryGuardTTL is how long a decision nonce lives when the client's
// options give no span: a UniversalClient other than *redis.Client,
// *redis.ClusterClient or *redis.Ring, a client without a read deadline, or
// a guard forced on for a client that does not retry. It is go-redis's
// default span: 4 attempts × (5s read + 5s write timeout + 1s backoff) + 1s.
const DefaultRetryGuardTTL = 45 * time.Second

// retryGuardMargin is added to a client's computed retry span: the nonce must
// outlive the last re-sent copy of a script, which may sit in Redis's input
// queue a moment after the client gave up waiting for it.
const retryGuardMargin = time.Second

// Redis is a tollgate.Store that makes every decision with one Lua script on
// Redis (package lua): the refill, the check and the debit run on the Redis
// main thread with no other command in between, with the Redis server's
// clock, so any number of replicas sharing one Redis enforce one quota.
//
// It works with *redis.Client (including one from redis.NewFailoverClient,
// for Sentinel), *redis.ClusterClient and *redis.Ring.
//
// A decision on identity K with algorithm A touches the keys
//
//	<prefix>{<tag>}:<a>          state (the sliding window's first slot)
//	<prefix>{<tag>}:<a>:1        the sliding window's second slot
//	<prefix>{<tag>}:<a>:r:<id>   request-id marker (hash of Request.RequestID)
//	<prefix>{<tag>}:<a>:n:<n>    decision nonce of the retry guard
//
// where <a> names A (tb, gcra, sw or fw) and <tag> is K itself when it is at most
// 64 bytes of letters, digits and "-_.:/@=+,", K percent-escaped when that
// fits in 64 bytes, and otherwise "#" and a 128-bit hash of K. One hash tag
// keeps a decision on one Cluster slot, and no identity can produce another
// identity's tag. Every key a script writes expires once it no longer
// matters.
//
// A Redis is safe for concurrent use.
type Redis struct {
	client  redis.UniversalClient
	prefix  string
	replays replays
	// guard is nil to follow the client's retry settings, or forces the
	// retry guard on or off.
	guard    *bool
	guardTTL time.Duration // 0: derived from the client
	// nonceTTLms is ARGV[7]: the nonce lifetime, 0 when the guard is off.
	nonceTTLms int64
	// deadlineBounds reports that the client never starts a re-send after
	// the context is done (it sleeps a backoff with the context first), so
	// a nonce need not outlive the context's deadline by more than
	// retryGuardMargin.
	deadlineBounds bool
	// deadlineSafe reports that the client gives up a command when its
	// context ends (go-redis's ContextTimeoutEnabled). When it does not, a
	// decision that goes to Redis alone runs in a goroutine of its own and
	// the caller leaves at its deadline, so a hung Redis never holds a call
	// for the client's ReadTimeout (3s by default) times its retries.
	deadlineSafe bool
	// replayTTLms is ARGV[6], the replay TTL in milliseconds.
	replayTTLms int64
	// batch shares round trips between concurrent decisions; nil when
	// batching is off (see WithBatching).
	batch *batcher
	// deny repeats recent denials without a round trip; nil when off (see
	// WithDenyCache).
	deny *denyCache
}

// WithPrefix sets the string every key starts with (default DefaultPrefix),
// to share one Redis between applications or environments. The prefix must
// not contain "{" or "}": the hash tag that keeps a decision's keys on one
// Cluster slot must be the first braces in every key. WithPrefix panics if
// it does.
func WithPrefix(prefix string) RedisOption {
	if strings.ContainsAny(prefix, "{}") {
		panic(fmt.Sprintf("tollgate: store.WithPrefix(%q): the prefix must not contain braces, which would move the Cluster hash tag", prefix))
	}
	return redisOption(func(r *Redis) { r.prefix = prefix })
}

// WithRetryGuard forces the retry guard on or off. By default it is on when
// the client re-sends commands (go-redis's MaxRetries, or a ClusterClient's
// MaxRedirects, above 0) and off when it cannot.
//
// The guard exists because go-redis re-sends a command whose reply did not
// arrive within ReadTimeout, and Redis may have run the first copy: without
// the guard one decision could be debited twice. With it, each decision
// carries a random nonce; an admitted run stores its reply under the nonce
// (one extra small key, expiring after the retry span) and a re-sent copy
// returns that reply without a debit. The nonce lives for the client's retry
// span (see WithRetryGuardTTL), or, when the call's context has a deadline
// and the client backs off before re-sending, until 1s past that deadline,
// whichever is shorter. A client that never re-sends
// (MaxRetries: -1, and MaxRedirects: -1 for a ClusterClient) needs no guard
// and saves the write.
func WithRetryGuard(on bool) RedisOption {
	return redisOption(func(r *Redis) { r.guard = &on })
}

// WithRetryGuardTTL sets how long a decision nonce lives, instead of the
// span derived from the client's options: (attempts) × (ReadTimeout +
// WriteTimeout + MaxRetryBackoff) + 1s. It must cover the time from a
// script's first run to its last re-sent copy. It does not turn the guard
// on; see WithRetryGuard.
func WithRetryGuardTTL(d time.Duration) RedisOption {
	return redisOption(func(r *Redis) { r.guardTTL = d })
}

// NewRedis returns a store deciding on c with the given options. c is used as
// it is; its retry settings decide whether the retry guard is on (see
// WithRetryGuard). Concurrent decisions share round trips (WithBatching)
// and recent denials are repeated from memory (WithDenyCache) unless those
// options turn them off.
func NewRedis(c redis.UniversalClient, opts ...RedisOption) *Redis {
	r := &Redis{
		client:  c,
		prefix:  DefaultPrefix,
		replays: defaultReplays(),
		batch:   &batcher{maxBatch: DefaultBatchSize, maxPipelines: DefaultMaxPipelines},
		deny:    newDenyCache(DefaultDenyCacheSize),
	}
	for _, o := range opts {
		o.applyRedis(r)
	}
	r.replayTTLms = r.replays.ttlMs()
	r.deadlineSafe = honoursDeadlines(c)
	retries, span, deadlineBounds := retrySpan(c)
	on := retries
	if r.guard != nil {
		on = *r.guard
	}
	if on {
		ttl := r.guardTTL
		if ttl <= 0 {
			ttl = span
		}
		if ttl <= 0 {
			ttl = DefaultRetryGuardTTL
		}
		r.nonceTTLms = max(durationMs(ttl), 1)
		r.deadlineBounds = deadlineBounds && r.guardTTL <= 0
	}
	return r
}

// RetryGuard reports whether decisions carry a nonce against double debits
// on client retries, and how long a nonce lives at most (a call whose
// context has a deadline may use a shorter life; see WithRetryGuard).
func (r *Redis) RetryGuard() (on bool, ttl time.Duration) {
	return r.nonceTTLms > 0, time.Duration(r.nonceTTLms) * time.Millisecond
}

// durationMs rounds d up to whole milliseconds.
func durationMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// honoursDeadlines reports whether c ends a command's socket I/O when the
// command's context ends. go-redis does so only with ContextTimeoutEnabled;
// otherwise it waits for ReadTimeout whatever the context says. A client of
// unknown type counts as not honouring them.
func honoursDeadlines(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// retrySpan reports whether c may send one command more than once, for how
// long after the first send a copy may still arrive, attempts ×
// (ReadTimeout + WriteTimeout + MaxRetryBackoff) + retryGuardMargin, and
// whether a context deadline bounds that span too (the client sleeps a
// non-zero backoff, watching the context, before each re-send). The options
// read are the normalized ones go-redis keeps after construction.
func retrySpan(c redis.UniversalClient) (retries bool, span time.Duration, deadlineBounds bool) {
	var attempts int
	var read, write, minBackoff, maxBackoff time.Duration
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		// MaxRetries -1 (disabled) is kept as 0.
		attempts = max(o.MaxRetries, 0) + 1
		read, write, minBackoff, maxBackoff = o.ReadTimeout, o.WriteTimeout, o.MinRetryBackoff, o.MaxRetryBackoff
	case *redis.ClusterClient:
		o := c.Options()
		// The cluster client re-sends up to MaxRedirects times on a timeout
		// (MaxRetries is disabled by default for it), and each node client
		// retries MaxRetries times within each of those attempts.
		attempts = (max(o.MaxRedirects, 0) + 1) * (max(o.MaxRetries, 0) + 1)
		read, write, minBackoff, maxBackoff = o.ReadTimeout, o.WriteTimeout, o.MinRetryBackoff, o.MaxRetryBackoff
	case *redis.Ring:
		o := c.Options()
		attempts = max(o.MaxRetries, 0) + 1
		read, write, minBackoff, maxBackoff = o.ReadTimeout, o.WriteTimeout, o.MinRetryBackoff, o.MaxRetryBackoff
		if read == 0 {
			read = 5 * time.Second // the shard clients' default
		}
	default:
		return true, DefaultRetryGuardTTL, false
	}
	if attempts <= 1 {
		return false, 0, false
	}
	deadlineBounds = minBackoff > 0
	if read <= 0 {
		// No read deadline: a reply can take any time, so no span derived
		// from the options bounds a re-send.
		return true, DefaultRetryGuardTTL, deadlineBounds
	}
	return true, time.Duration(attempts)*(read+max(write, 0)+max(maxBackoff, 0)) + retryGuardMargin, deadlineBounds
}

// nonceTTL returns ARGV[7] for a call under ctx: the configured lifetime,
// shortened to the context's deadline plus retryGuardMargin when the client
// never re-sends after the deadline. A limiter that gives each decision a
// short deadline so keeps few nonces alive.
func (r *Redis) nonceTTL(ctx context.Context) int64 {
	if !r.deadlineBounds {
		return r.nonceTTLms
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		return r.nonceTTLms
	}
	return min(r.nonceTTLms, max(durationMs(time.Until(deadline)), 0)+durationMs(retryGuardMargin))
}

// Allow makes one decision with one script call, or none when the same
// denial is still in force (see WithDenyCache). An invalid request returns
// an error wrapping tollgate.ErrInvalidRequest without touching Redis; an
// error from Redis (unreachable, timed out, a script error) is returned
// wrapped, starting "tollgate: redis store:", and never wraps
// tollgate.ErrInvalidRequest.
func (r *Redis) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	req, err := req.Normalized()
	if err != nil {
		return tollgate.Decision{}, err
	}
	l := req.Limit
	var maxReplays int64
	requestID := ""
	if req.RequestID != "" && r.replays.max > 0 {
		maxReplays, requestID = r.replays.max, req.RequestID
	}
	var dk denyKey
	var sent int64
	var probe chan struct{}
	if r.deny != nil {
		dk = r.deny.key(req.Key, l.Algorithm)
		// A request id may replay an admission: only Redis knows.
		for requestID == "" {
			d, v, wait := r.deny.lookup(dk, l, req.Cost)
			if v == verdictDenied {
				return d, nil
			}
			if v != verdictWait {
				probe = wait
				break
			}
			select {
			case <-wait:
			case <-ctx.Done():
				return tollgate.Decision{}, fmt.Errorf("tollgate: redis store: %s script: %w", l.Algorithm, ctx.Err())
			}
		}
		sent = r.deny.now()
	}
	c := r.newCall(ctx, req, requestID, maxReplays)
	if err := r.send(ctx, c); err != nil {
		if probe != nil {
			r.deny.settle(dk, l, req.Cost, sent, tollgate.Decision{}, false, probe)
		}
		return tollgate.Decision{}, fmt.Errorf("tollgate: redis store: %s script: %w", l.Algorithm, err)
	}
	reply, err := c.reply, c.err
	calls.Put(c)
	d := decisionOf(reply)
	if r.deny != nil {
		r.deny.settle(dk, l, req.Cost, sent, d, err == nil, probe)
	}
	if err != nil {
		r.refreshRouting(err)
		return tollgate.Decision{}, fmt.Errorf("tollgate: redis store: %s script: %w", l.Algorithm, err)
	}
	return d, nil
}

// refreshRouting asks a Cluster client to reload its slot map after a
// decision failed without a reply from Redis (a refused connection, a
// timeout). go-redis reloads the map by itself only when a node answers
// MOVED, ASK or READONLY, or every ClusterStateReloadInterval (60s by
// default): after a primary dies it keeps sending that primary's slots to
// the dead address, which never answers MOVED, long after a replica has
// been promoted. The reload runs in the background, at most one at a time
// and one every 200ms (go-redis coalesces them).
func (r *Redis) refreshRouting(err error) {
	cc, ok := r.client.(*redis.ClusterClient)
	if !ok || errors.Is(err, context.Canceled) {
		return
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return // the node answered: it is there
	}
	cc.ReloadState(context.Background())
}

// errBadReply means a script answered something other than lua/doc.go's
// five integers: the scripts on the server are not the ones this package
// was built with.
var errBadReply = errors.New("script reply is not five integers")

// decisionOf turns a script's {allowed, remaining, retry_after_us,
// reset_after_us, replayed} into a Decision.
func decisionOf(v [5]int64) tollgate.Decision {
	return tollgate.Decision{
		Allowed:    v[0] == 1,
		Remaining:  v[1],
		RetryAfter: time.Duration(v[2]) * time.Microsecond,
		ResetAfter: time.Duration(v[3]) * time.Microsecond,
		Replayed:   v[4] == 1,
	}
}
