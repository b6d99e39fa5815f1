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
//	<prefix>{<tag>}:<a>          state (a short string of decimal integers)
//	<prefix>{<tag>}:<a>:r:<id>   request-id marker (hash of Request.RequestID)
//
// where <a> names A (tb, gcra, sw or fw) and <tag> is K itself when it is at most
// 64 bytes of letters, digits and "-_.:/@=+,", K percent-escaped when that
// fits in 64 bytes, and otherwise "#" and a 128-bit hash of K. One hash tag
// keeps a decision on one Cluster slot, and no identity can produce another
// identity's tag. A Key made by PartKey(K, P) has the tag of K and the state
// <prefix>{<tag>}/<P escaped>:<a>, so the parts of one identity share its
// slot. Every key a script writes expires once it no longer matters.
//
// A decision is debited at most once. go-redis re-sends a command whose
// reply did not arrive (MaxRetries, and a ClusterClient's MaxRedirects),
// and Redis may have run the first copy; the store marks its script calls
// as commands never to re-send (go-redis's Cmder.NoRetry), alone or in a
// pipeline, whatever the client's options say. A decision whose reply is
// lost is an error, which the caller's fail policy handles.
//
// A Redis is safe for concurrent use.
type Redis struct {
	client redis.UniversalClient
	// cluster is client when it is a *redis.ClusterClient, else nil: the
	// store routes batches and reloads slot maps through it.
	cluster *redis.ClusterClient
	prefix  string
	replays replays
	// deadlineSafe reports that the client gives up a command when its
	// context ends (go-redis's ContextTimeoutEnabled). When it does not, a
	// decision that goes to Redis alone runs in a goroutine of its own and
	// the caller leaves at its deadline, so a hung Redis never holds a call
	// for the client's ReadTimeout (3s by default) times its retries.
	deadlineSafe bool
	// batch shares round trips between concurrent decisions; nil when
	// batching is off (see WithBatching). On a ClusterClient it is the
	// template of primaries' batchers, and serves the decisions whose
	// primary the slot map cannot name.
	batch     *batcher
	primaries primaries
	// noBatchScript keeps a batch's decisions in calls of their own (see
	// WithBatchScript).
	noBatchScript bool
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

// NewRedis returns a store deciding on c with the given options. c is used as
// it is: its retry settings do not apply to the store's script calls, which
// are never re-sent (see Redis). Concurrent decisions share round trips
// (WithBatching) and recent denials are repeated from memory (WithDenyCache)
// unless those options turn them off.
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
	r.deadlineSafe = honoursDeadlines(c)
	r.cluster, _ = c.(*redis.ClusterClient)
	return r
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
	mode := r.modeFor(req.RequestID)
	var tk ticket
	if mode == modeNoID { // a request id may replay an admission: only Redis knows
		var denied bool
		var d tollgate.Decision
		if d, denied, tk, err = r.deny.consult(ctx, req); denied || err != nil {
			return d, r.wrap(req, err)
		}
	}
	d, err := r.decide(ctx, req, mode)
	tk.settle(d, err == nil)
	return d, r.wrap(req, err)
}

// decide sends req (normalized) in mode as one decide script call.
func (r *Redis) decide(ctx context.Context, req tollgate.Request, mode int64) (tollgate.Decision, error) {
	c := r.newCall(ctx, []tollgate.Request{req}, mode, req.RequestID, r.replays.ttlMsFor(req.ReplayTTL))
	if err := r.send(ctx, c); err != nil {
		return tollgate.Decision{}, err // c is abandoned to its runner
	}
	d, err := decisionOf(c.reply), c.err
	calls.Put(c)
	if err != nil {
		r.refreshRouting(err)
		return tollgate.Decision{}, err
	}
	return d, nil
}

// wrap says where err, from deciding req, comes from; nil stays nil.
func (r *Redis) wrap(req tollgate.Request, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("tollgate: redis store: %s script: %w", req.Limit.Algorithm, err)
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
	if r.cluster == nil || errors.Is(err, context.Canceled) {
		return
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return // the node answered: it is there
	}
	r.cluster.ReloadState(context.Background())
}

// modeFor is the decide mode (ARGV[1]) of a decision carrying requestID:
// the store's max replays, or modeNoID without an id or with ids off.
func (r *Redis) modeFor(requestID string) int64 {
	if requestID == "" {
		return modeNoID
	}
	return r.replays.max
}

// errBadReply means a script answered something other than lua/doc.go
// says (five integers per group and the time; a batch: each decision's
// compact answer and the time): the scripts on the server are not the ones
// this package was built with.
var errBadReply = errors.New("script reply is not what lua/doc.go says the script answers")

// decisionOf turns a script's {allowed, remaining, retry_after_us,
// reset_after_us, replayed}, the first five integers of v, into a Decision;
// the zero Decision when v is shorter (a failed call).
func decisionOf(v []int64) tollgate.Decision {
	if len(v) < 5 {
		return tollgate.Decision{}
	}
	return tollgate.Decision{
		Allowed:    v[0] == 1,
		Remaining:  v[1],
		RetryAfter: time.Duration(v[2]) * time.Microsecond,
		ResetAfter: time.Duration(v[3]) * time.Microsecond,
		Replayed:   v[4] == 1,
	}
}
