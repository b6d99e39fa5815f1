package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/lua"
)

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
// identity's tag. A Key K, the byte 0x1F and P (a part P of identity K)
// has the tag of K and the state <prefix>{<tag>}/<P escaped>:<a>, so the
// parts of one identity share its slot, and AllowAll decides several
// limits of one identity in one script call on a Cluster too. Every key a script writes expires once it no longer matters.
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
	// road is the way the store's script calls go to Redis and back
	// (redis_batcher.go): the client, batching, the journal.
	road
	// keys says where the store's keys live (redis_keys.go).
	keys    keySpace
	replays replays
	// deny repeats recent denials without a round trip; nil when off (see
	// WithDenyCache).
	deny *denyCache
	// levels orders the parts of a set spread over slots (see AllowAll).
	levels *levels
	// prefix and tagCount are WithPrefix's and WithClusterTags' (see
	// keys).
	prefix   string
	tagCount int
	// Failover handling (redis_failover.go): the client's hooks, the
	// journal's window (WithJournal) and memory (WithJournalBytes), when
	// exactness is paid (WithExactness); the client's failover machinery
	// is road's; closeOnce and lastStore are Close's.
	hooks         *clientHooks
	journalWindow time.Duration
	journalBytes  int64
	exactness     Exactness
	closeOnce     sync.Once
	lastStore     bool
	// persistence is the one check that Redis persists long limits
	// (persistence.go).
	persistence persistence
}

// NewRedis returns a store deciding on c with the given options. c is used as
// it is: its retry settings do not apply to the store's script calls, which
// are never re-sent (see Redis). Concurrent decisions share round trips
// (WithBatching) and recent denials are repeated from memory (WithDenyCache)
// unless those options turn them off. NewRedis chains an OnConnect into c's
// options that loads the scripts on each new connection, so create the
// store before c is used by other goroutines; and it keeps recent
// admissions to debit them again after a failover (WithJournal), with a
// goroutine that Close stops. A nil c, or an option given a value outside
// its range, is an error (ErrInvalidOption); the store is then not
// created.
func NewRedis(c redis.UniversalClient, opts ...RedisOption) (*Redis, error) {
	if check.Nil(c) {
		return nil, fmt.Errorf("%w: NewRedis: the client is nil", ErrInvalidOption)
	}
	r := &Redis{
		road:    road{sender: sender{client: c}, batch: &batcher{maxBatch: defaultBatchSize, maxPipelines: defaultMaxPipelines}},
		prefix:  defaultPrefix,
		replays: defaultReplays(),
		deny:    newDenyCache(defaultDenyCacheSize),
		levels:  newLevels(),

		journalWindow: defaultJournalWindow,
		journalBytes:  defaultJournalBytes,
	}
	r.persistence.done = make(chan struct{})
	for _, o := range opts {
		if err := o.applyRedis(r); err != nil {
			return nil, err
		}
	}
	r.deadlineSafe = honoursDeadlines(c)
	r.cluster, _ = c.(*redis.ClusterClient)
	r.keys = newKeySpace(r.prefix, r.tagCount, c)
	r.batchScript = !r.noBatchScript && (r.keys.single || r.keys.cluster && r.keys.tagPrefixes != nil)
	r.startFailover() // redis_failover.go
	return r, nil
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
	req, err := check.Normalize(req)
	if err != nil {
		return tollgate.Decision{}, err
	}
	r.persistence.note(req.Limit, &r.road)
	if req.Overdraw {
		reqs := []tollgate.Request{req}
		ds, err := r.overdraw(ctx, reqs, r.keys.layOut(reqs, ""))
		if err != nil {
			return tollgate.Decision{}, err
		}
		return ds[0], nil
	}
	mode := r.replays.modeFor(req.RequestID, req.ReplayTTL)
	var tk ticket
	if !mode.markers() { // a request id may replay an admission: only Redis knows
		var denied bool
		var d tollgate.Decision
		if d, denied, tk, err = r.deny.consult(ctx, req); denied || err != nil {
			return d, r.wrap(req, err)
		}
	}
	d, err := r.decide(ctx, req, mode)
	tk.record(d, err == nil)
	return d, r.wrap(req, err)
}

// decide sends req (normalized) in mode as one decide script call.
func (r *Redis) decide(ctx context.Context, req tollgate.Request, mode decideMode) (tollgate.Decision, error) {
	c := r.keys.decisionCall(ctx, req, mode)
	if err := r.send(ctx, c); err != nil {
		return tollgate.Decision{}, err // c is abandoned to its runner
	}
	d, err := c.decisions[0], c.err
	calls.Put(c)
	if err != nil {
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

// Peek reports what Allow would answer for req now, without a debit and
// without reading or recording its RequestID: one decide script call in
// its read-only mode, which writes nothing. A denial also reports the
// identity's Debt, which takes a settle script call at the reserved cost
// (which writes nothing either).
//
// A peek writes nothing, so one whose connection was closed under it (the
// reply lost: a killed client, a restarted proxy) is asked again (askAgain).
func (r *Redis) Peek(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	req, err := check.Normalize(req)
	if err != nil {
		return tollgate.Decision{}, err
	}
	d, err := askAgain(ctx, func() (tollgate.Decision, error) { return r.peek(ctx, req) })
	if err != nil {
		return tollgate.Decision{}, fmt.Errorf("tollgate: redis store: peek: %w", err)
	}
	return d, nil
}

// peek is one attempt of Peek on a normalized req.
func (r *Redis) peek(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	d, err := r.decide(ctx, req, decideMode{peek: true})
	if err == nil && !d.Allowed {
		// The debt, read by the settle script's look: a settlement at
		// the cost reserved, which changes nothing and writes nothing.
		look := req
		look.RequestID = ""
		var s []tollgate.Decision
		looks := []tollgate.Request{look}
		if s, err = r.settle(ctx, looks, r.keys.layOut(looks, ""), []tollgate.Admission{{}}, []int64{req.Cost}, settleLook); err == nil {
			d.Debt = s[0].Debt
		}
	}
	return d, err
}

// Reset forgets req's Key under req's algorithm (a DEL of its state key):
// a full bucket or an empty window again. Request ids it admitted are still
// remembered. This store's deny cache forgets the identity too; another
// store's remembered denial of it runs out on its own (at most
// 10 s).
func (r *Redis) Reset(ctx context.Context, req tollgate.Request) error {
	req, err := check.Normalize(req)
	if err != nil {
		return err
	}
	if r.deny != nil {
		defer r.deny.forget(r.deny.key(req.Key, req.Limit.Algorithm))
	}
	k := decisionKeys(r.keys.of(req.Key), req.Limit.Algorithm, req.Key, "")[0]
	sc := [1]scriptCall{{script: resetScript, args: []any{nil, nil, 1, k}}}
	err = r.exchange(ctx, sc[:])
	if err == nil {
		err = readReset(sc[0].cmd)
	}
	if err != nil {
		return fmt.Errorf("tollgate: redis store: reset: %w", err)
	}
	return nil
}

// The reset script deletes one state key.
var resetScript = newScript(lua.Reset, sentOnce)

// readReset decodes a reset script call's reply (lua/doc.go): {deleted}.
func readReset(cmd redis.Cmder) error {
	v, err := cmd.(scriptCmd).Result()
	if err == nil && len(v) != 1 {
		err = errBadReply
	}
	return err
}
