package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/lua"
)

// Batching defaults (see WithBatching).
const (
	// DefaultBatchSize is the most decisions one pipeline carries.
	DefaultBatchSize = 128
	// DefaultMaxPipelines is how many round trips one store keeps in flight
	// at once: two, so that Redis runs one batch of scripts while the next
	// is being written and the previous one's replies read.
	DefaultMaxPipelines = 2
)

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
// maxPipelines below 1 turns batching off: every decision is its own
// round trip (Script.Run), as go-redis's AutoPipeliner needs when the store
// is given one as its client.
func WithBatching(maxBatch, maxPipelines int) RedisOption {
	return redisOption(func(r *Redis) {
		if maxBatch < 1 || maxPipelines < 1 {
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
// own, in order, as its own call would be. It applies only to a
// *redis.Client (a single node, or Sentinel through NewFailoverClient): the
// keys of a ClusterClient's or a Ring's decisions may live on different
// nodes or slots, which one script call cannot declare together, so there
// each decision keeps its own call.
func WithBatchScript(on bool) RedisOption {
	return redisOption(func(r *Redis) { r.noBatchScript = !on })
}

// Script-call arguments that never change, boxed once: converting a string
// to an interface value allocates.
var (
	evalshaArg any = "evalsha"
	evalArg    any = "eval"
	decideSHA  any = lua.Hash(lua.Decide)
	decideText any = lua.Source(lua.Decide)
	batchSHA   any = lua.Hash(lua.Batch)
	batchText  any = lua.Source(lua.Batch)
)

// Decide modes (ARGV[1], lua/doc.go): a peek writes nothing; a decision
// without a request id is mode 0, with one the store's max replays (> 0),
// followed by the markers' TTL.
const (
	modePeek  = -1
	modeNoID  = 0
	maxHeader = 2 // mode, replay TTL
	groupArgs = 5 // algorithm, rate, period, capacity, cost
)

// call is one decide script call on its way to Redis: the script's KEYS and
// ARGV, laid out so that handing them to go-redis (as pointers, which box
// without allocating) costs nothing beyond the call itself, and the answer.
// A call of one group (a single decision) uses the arrays in the call; a
// call of several groups allocates its slices.
type call struct {
	groups int
	keys   []string // the groups' state keys, then their markers
	argv   []int64  // mode, replay TTL (with a request id), then groupArgs per group
	args   []any    // EVALSHA sha numkeys KEYS... ARGV...
	// deadline is the caller's context deadline; zero for none.
	deadline time.Time

	// Written by whoever runs the call, then signalled on done.
	reply []int64 // 5 per group, then the server time
	err   error
	done  chan struct{} // capacity 1, so the runner never blocks on a caller that left

	keyBuf  [2]string
	argvBuf [maxHeader + groupArgs]int64
	argBuf  [3 + 2 + maxHeader + groupArgs]any
}

// calls recycles calls whose caller read the answer. A call abandoned by
// its caller (context done while it was in flight) is left to the garbage
// collector: its runner may still write to it.
var calls = sync.Pool{New: func() any {
	return &call{done: make(chan struct{}, 1)}
}}

// newCall takes a call from the pool and fills it in under ctx for reqs
// (normalized, one slot's worth; see AllowAll) in mode (modePeek, modeNoID
// or the max replays of a request id, when the groups' markers are named
// after requestID) with markers living ttlMs.
func (r *Redis) newCall(ctx context.Context, reqs []tollgate.Request, mode int64, requestID string, ttlMs int64) *call {
	c := calls.Get().(*call)
	n := len(reqs)
	nkeys, header := n, 1
	if mode > 0 {
		nkeys, header = 2*n, 2
	}
	nargv := header + groupArgs*n
	c.groups = n
	if n == 1 {
		c.keys, c.argv, c.args = c.keyBuf[:nkeys], c.argvBuf[:nargv], c.argBuf[:3+nkeys+nargv]
	} else {
		c.keys, c.argv, c.args = make([]string, nkeys), make([]int64, nargv), make([]any, 3+nkeys+nargv)
	}
	c.argv[0] = mode
	if mode > 0 {
		c.argv[1] = ttlMs
	}
	id := ""
	if mode > 0 {
		id = requestID
	}
	for i, req := range reqs {
		var k [2]string
		fillDecisionKeys(&k, r.prefix, req.Limit.Algorithm, req.Key, id)
		c.keys[i] = k[0]
		if mode > 0 {
			c.keys[n+i] = k[1]
		}
		p := algo.ParamsOf(req)
		g := c.argv[header+groupArgs*i:]
		g[0], g[1], g[2], g[3], g[4] = int64(req.Limit.Algorithm), p.Rate, p.Period, p.Capacity, p.Cost
	}
	c.args[2] = int64(nkeys)
	for i := range c.keys {
		c.args[3+i] = &c.keys[i]
	}
	for i := range c.argv {
		c.args[3+nkeys+i] = &c.argv[i]
	}
	c.deadline, _ = ctx.Deadline()
	c.reply, c.err = nil, nil
	return c
}

// scriptCmd is a script call that go-redis must send at most once. go-redis
// re-sends a command whose reply did not arrive (a read timeout, a
// connection closed under it: MaxRetries, and a ClusterClient's
// MaxRedirects), and Redis may have run the first copy, so a re-sent
// decision could be debited twice. A command whose NoRetry is true is never
// re-sent once written, alone or in a pipeline, by any go-redis client;
// redirects (MOVED, ASK), which mean it did not run, are still followed.
type scriptCmd struct{ *redis.IntSliceCmd }

// NoRetry reports that the command must not be re-sent.
func (scriptCmd) NoRetry() bool { return true }

// command returns the call as EVALSHA, or as EVAL with the script's source
// (which also loads it on the node that runs it) when eval is set.
func (c *call) command(ctx context.Context, eval bool) scriptCmd {
	if eval {
		c.args[0], c.args[1] = evalArg, decideText
	} else {
		c.args[0], c.args[1] = evalshaArg, decideSHA
	}
	cmd := redis.NewIntSliceCmd(ctx, c.args...)
	cmd.SetFirstKeyPos(3) // KEYS[1]: the Cluster slot, without parsing numkeys
	return scriptCmd{cmd}
}

// finish records cmd's outcome as the call's answer.
func (c *call) finish(cmd scriptCmd) {
	v, err := cmd.Result()
	if err == nil && len(v) != 5*c.groups+1 {
		err = errBadReply
	}
	c.reply, c.err = v, err
}

// isNoScript reports a reply saying the server does not have the script:
// after a restart, a failover, SCRIPT FLUSH, or on a Cluster node that never
// ran it.
func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// runOne sends c alone under the caller's ctx: EVALSHA, then EVAL once on
// NOSCRIPT, as go-redis's Script.Run does.
func (r *Redis) runOne(ctx context.Context, c *call) {
	cmd := c.command(ctx, false)
	if err := r.client.Process(ctx, cmd); isNoScript(err) {
		cmd = c.command(ctx, true)
		_ = r.client.Process(ctx, cmd)
	}
	c.finish(cmd)
}

// runBatch sends calls as one pipeline, re-sends the commands answered
// NOSCRIPT as a second pipeline of EVAL (so the script is loaded on exactly
// the nodes that lacked it), and signals every call. On a *redis.Client the
// single decisions among calls travel as batch script calls of up to
// maxShared decisions (see WithBatchScript and shared); every other call is
// a decide call of its own.
//
// The pipeline outlives any one caller's context: it runs until the latest
// deadline among its calls, or with none (the client's timeouts bound it)
// when one of them has none.
func (r *Redis) runBatch(batch []*call) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	var shares []*shared
	own := batch // the calls sent as decide calls of their own
	if r.batchScript() {
		shares, own = shareCalls(batch)
	}
	cmds := make([]scriptCmd, len(own)+len(shares))
	pipe := r.client.Pipeline()
	for i, c := range own {
		cmds[i] = c.command(ctx, false)
		_ = pipe.Process(ctx, cmds[i])
	}
	for i, s := range shares {
		cmds[len(own)+i] = s.command(ctx, false)
		_ = pipe.Process(ctx, cmds[len(own)+i])
	}
	_, _ = pipe.Exec(ctx) // every command carries its own error
	var missing []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		pipe = r.client.Pipeline()
		for _, i := range missing {
			if i < len(own) {
				cmds[i] = own[i].command(ctx, true)
			} else {
				cmds[i] = shares[i-len(own)].command(ctx, true)
			}
			_ = pipe.Process(ctx, cmds[i])
		}
		_, _ = pipe.Exec(ctx)
	}
	for i, c := range own {
		c.finish(cmds[i])
	}
	for i, s := range shares {
		s.finish(cmds[len(own)+i])
	}
	for _, c := range batch {
		c.done <- struct{}{}
	}
}

// batchScript reports whether the store sends a batch's single decisions
// as one batch script call: only to a *redis.Client, whose commands all go
// to one server, and unless WithBatchScript turned it off.
func (r *Redis) batchScript() bool {
	_, single := r.client.(*redis.Client)
	return single && !r.noBatchScript
}

// Per-decision answers of the batch script (lua/doc.go) that are not
// decisions: the decision alone failed, the others of its call did not.
var (
	errBatchArgs  = errors.New("the batch script rejected the decision's arguments; nothing of it was written")
	errBatchWrite = errors.New("redis refused the decision's write (a request-id marker that is not an integer, or out of memory); nothing of it was written")
)

// maxShared is the most decisions one batch script call carries, whatever
// WithBatching allows: Redis runs nothing else while a script runs, and 128
// decisions take it well under a millisecond.
const maxShared = 128

// shared is single decisions of one batch sent as one batch script call,
// in the batch script's layout (lua/doc.go): each distinct profile (what a
// call's argv holds: mode, TTL, limit and cost) once, then each decision's
// profile; or inline, each decision's argv in turn, when the decisions
// share too few profiles for that to pay.
type shared struct {
	calls []*call
	args  []any // EVALSHA sha numkeys KEYS... ARGV...
}

// shareCalls splits batch into batch script calls of the single decisions
// (one group each; at most maxShared per call, and only when there are at
// least two) and the calls sent on their own.
func shareCalls(batch []*call) ([]*shared, []*call) {
	var singles, own []*call
	for _, c := range batch {
		if c.groups == 1 {
			singles = append(singles, c)
		} else {
			own = append(own, c)
		}
	}
	if len(singles) < 2 {
		return nil, batch
	}
	var out []*shared
	for len(singles) > 0 {
		n := min(len(singles), maxShared)
		if n == 1 {
			own = append(own, singles[0])
			break
		}
		out = append(out, newShared(singles[:n]))
		singles = singles[n:]
	}
	return out, own
}

// newShared lays out calls, single decisions, as one batch script call:
// their keys one after the other, then their distinct profiles, found by a
// linear scan (a batch holds at most maxShared decisions and usually one or
// two profiles), then each decision's profile. When fewer than two
// decisions share each profile on average, it sends them inline instead,
// each decision's own argv in turn: a profile and a decision's reference to
// it cost Redis more than the decision's own arguments (measured with
// lua.BenchmarkBatchServerCost, limits=each). Every argument is a pointer
// into a call's argv or a small integer (the number of profiles, a
// decision's profile, the TTL of a profile without a request id), which Go
// boxes without allocating. A call whose argv is not one whole decision
// (mode, TTL when mode > 0, five numbers) names profile 0, which the script
// rejects: the whole call fails and nothing of it is written.
func newShared(calls []*call) *shared {
	var firstBuf [maxShared]*call // the first call of each distinct profile
	var placeBuf [maxShared]int   // each call's profile, 1-based; 0 for none
	firsts, places := firstBuf[:0], placeBuf[:0]
	nkeys, nargv, whole := 0, 0, true
	for _, c := range calls {
		nkeys += len(c.keys)
		nargv += len(c.argv)
		place := 0
		if wholeDecision(c) {
			for p, first := range firsts {
				if slices.Equal(first.argv, c.argv) { // the whole profile: mode, TTL when mode > 0, limit, cost
					place = p + 1
					break
				}
			}
			if place == 0 {
				firsts = append(firsts, c)
				place = len(firsts)
			}
		} else {
			whole = false
		}
		places = append(places, place)
	}
	inline := whole && 2*len(firsts) > len(calls)
	if !inline {
		nargv = 7*len(firsts) + len(calls)
	}
	s := &shared{calls: calls, args: make([]any, 3, 3+nkeys+1+nargv)}
	s.args[2] = int64(nkeys)
	for _, c := range calls {
		for i := range c.keys {
			s.args = append(s.args, &c.keys[i])
		}
	}
	if inline {
		s.args = append(s.args, int64(0))
		for _, c := range calls {
			for i := range c.argv {
				s.args = append(s.args, &c.argv[i])
			}
		}
		return s
	}
	s.args = append(s.args, int64(len(firsts)))
	for _, c := range firsts {
		s.args = append(s.args, &c.argv[0])
		if c.argv[0] > 0 {
			s.args = append(s.args, &c.argv[1])
		} else {
			s.args = append(s.args, int64(0))
		}
		g := c.argv[len(c.argv)-groupArgs:]
		s.args = append(s.args, &g[0], &g[1], &g[2], &g[3], &g[4])
	}
	for _, p := range places {
		s.args = append(s.args, int64(p))
	}
	return s
}

// wholeDecision reports whether c's argv is one decision of one group:
// mode, TTL when mode > 0, algorithm, rate, period, capacity, cost.
func wholeDecision(c *call) bool {
	h := 1
	if len(c.argv) > 0 && c.argv[0] > 0 {
		h = 2
	}
	return len(c.argv) == h+groupArgs
}

// command returns the shared call as EVALSHA of the batch script, or as
// EVAL with its source when eval is set.
func (s *shared) command(ctx context.Context, eval bool) scriptCmd {
	if eval {
		s.args[0], s.args[1] = evalArg, batchText
	} else {
		s.args[0], s.args[1] = evalshaArg, batchSHA
	}
	cmd := redis.NewIntSliceCmd(ctx, s.args...)
	cmd.SetFirstKeyPos(3)
	return scriptCmd{cmd}
}

// finish gives each call its own answer from cmd's, as a decide call of
// one group answers (its five integers and the server time), or its own
// error, or the whole call's error when the call failed as a whole (then
// the batch script wrote nothing) or its reply does not decode.
func (s *shared) finish(cmd scriptCmd) {
	v, err := cmd.Result()
	replies := make([]int64, 6*len(s.calls))
	if err == nil {
		next := 0
		for i := range s.calls {
			d, n, ok := lua.BatchDecision(v, next)
			if !ok {
				err = errBadReply
				break
			}
			copy(replies[6*i:6*i+5], d[:])
			next = n
		}
		if err == nil && next != len(v)-1 {
			err = errBadReply
		}
	}
	if err != nil {
		for _, c := range s.calls {
			c.reply, c.err = nil, err
		}
		return
	}
	now := v[len(v)-1]
	for i, c := range s.calls {
		reply := replies[6*i : 6*i+6 : 6*i+6]
		reply[5] = now
		switch reply[0] {
		case -1:
			c.reply, c.err = nil, errBatchArgs
		case -2:
			c.reply, c.err = nil, errBatchWrite
		default:
			c.reply, c.err = reply, nil
		}
	}
}

// batchContext returns the context a pipeline runs under: no caller's
// values or cancellation, and the latest of the calls' deadlines, if they
// all have one.
func batchContext(batch []*call) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range batch {
		if c.deadline.IsZero() {
			return context.Background(), func() {}
		}
		if c.deadline.After(latest) {
			latest = c.deadline
		}
	}
	return context.WithDeadline(context.Background(), latest)
}

// batcher makes concurrent decisions share round trips. It owns no
// goroutine of its own: a pipeline is run by a goroutine started when a
// round trip is needed, which keeps taking what has queued meanwhile and
// ends as soon as nothing is waiting, so an idle store holds none and needs
// no Close.
type batcher struct {
	maxBatch, maxPipelines int

	mu      sync.Mutex
	queue   []*call // waiting for a round trip, oldest first
	running int     // round trips in flight: lone calls and pipelines
}

// spill is how many waiting calls start another round trip while one is
// in flight.
func (b *batcher) spill() int { return max(b.maxBatch/4, 1) }

// takeLocked removes up to maxBatch calls from the head of the queue.
func (b *batcher) takeLocked() []*call {
	n := min(len(b.queue), b.maxBatch)
	batch := make([]*call, n)
	copy(batch, b.queue)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch
}

// primaries holds one batcher per Cluster primary, by address, made as
// primaries are first seen. A primary that left the Cluster keeps its idle
// batcher, a few dozen bytes, until the store is dropped.
type primaries struct {
	mu     sync.RWMutex
	byAddr map[string]*batcher
}

// batcherFor returns the batcher c goes through: the store's own, or on a
// ClusterClient the one of the primary serving c's slot (the store's own
// when the slot map cannot say, as while the Cluster is down).
func (r *Redis) batcherFor(ctx context.Context, c *call) *batcher {
	if r.cluster == nil || r.batch == nil {
		return r.batch
	}
	node, err := r.cluster.MasterForKey(ctx, c.keys[0])
	if err != nil {
		return r.batch
	}
	addr := node.Options().Addr
	r.primaries.mu.RLock()
	b := r.primaries.byAddr[addr]
	r.primaries.mu.RUnlock()
	if b != nil {
		return b
	}
	r.primaries.mu.Lock()
	defer r.primaries.mu.Unlock()
	if b = r.primaries.byAddr[addr]; b == nil {
		if r.primaries.byAddr == nil {
			r.primaries.byAddr = make(map[string]*batcher)
		}
		b = &batcher{maxBatch: r.batch.maxBatch, maxPipelines: r.batch.maxPipelines}
		r.primaries.byAddr[addr] = b
	}
	return b
}

// send runs c, alone or in a pipeline, and returns once its answer is in c
// (nil) or once ctx is done (ctx's error; c is then abandoned to its
// runner and must not be reused).
func (r *Redis) send(ctx context.Context, c *call) error {
	b := r.batcherFor(ctx, c)
	if b == nil {
		if r.deadlineSafe {
			r.runOne(ctx, c)
			return nil
		}
		go func() {
			r.runOne(ctx, c)
			c.done <- struct{}{}
		}()
		return r.await(ctx, c)
	}
	b.mu.Lock()
	if b.running == 0 {
		// Nothing in flight: go now, alone, under the caller's own context,
		// exactly as without batching. A client that ignores deadlines
		// runs it in a goroutine, so that the caller can leave on time.
		b.running++
		b.mu.Unlock()
		if r.deadlineSafe {
			r.runOne(ctx, c)
			r.roundTripDone(b)
			return nil
		}
		go func() {
			r.runOne(ctx, c)
			c.done <- struct{}{}
			r.roundTripDone(b)
		}()
		return r.await(ctx, c)
	}
	// Wait for the round trip in flight to end and take everyone waiting
	// then: one deep pipeline costs Redis and this process far fewer
	// system calls and wake-ups than several shallow ones. Another round
	// trip starts at once only when a batch's worth is already waiting.
	b.queue = append(b.queue, c)
	var batch []*call
	if b.running < b.maxPipelines && len(b.queue) >= b.spill() {
		b.running++
		batch = b.takeLocked()
	}
	b.mu.Unlock()
	if batch != nil {
		go r.pipelines(b, batch)
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	i := slices.Index(b.queue, c)
	if i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
	}
	b.mu.Unlock()
	if i < 0 {
		select {
		case <-c.done: // answered while the caller was leaving
			return nil
		default:
		}
	}
	return ctx.Err()
}

// await waits for c, which a goroutine of its own is running, until it is
// answered (nil) or ctx ends (ctx's error; c is abandoned to its runner).
func (r *Redis) await(ctx context.Context, c *call) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-c.done: // answered while the caller was leaving
		return nil
	default:
		return ctx.Err()
	}
}

// roundTripDone ends a lone call's round trip through b: the slot goes to
// the calls that queued meanwhile, if any.
func (r *Redis) roundTripDone(b *batcher) {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.running--
		b.mu.Unlock()
		return
	}
	batch := b.takeLocked()
	b.mu.Unlock()
	go r.pipelines(b, batch)
}

// pipelines runs batch, then whatever queued in b while it was in flight,
// until nothing waits.
func (r *Redis) pipelines(b *batcher, batch []*call) {
	for {
		r.runBatch(batch)
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		batch = b.takeLocked()
		b.mu.Unlock()
	}
}
