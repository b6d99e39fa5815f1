package store

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/tollgate/tollgate/store/internal/failover"
)

// road is the way a store's script calls go to Redis and back: each call
// through its primary's batcher, which shares round trips between
// concurrent calls (alone, folded into one script call, or pipelined),
// then read and journaled, and its caller woken.
type road struct {
	// sender holds the client, and the Cluster client it is, if it is
	// one, through which the store routes batches and reloads slot maps.
	sender
	// deadlineSafe reports that the client gives up a command when its
	// context ends (go-redis's ContextTimeoutEnabled). When it does not, a
	// script call runs in a goroutine of its own and the caller leaves at
	// its deadline (see exchange), so a hung Redis never holds a call for
	// the client's ReadTimeout (5s by default in go-redis v9.23) times its
	// retries.
	deadlineSafe bool
	// batch shares round trips between concurrent decisions; nil when
	// batching is off (see WithBatching). On a ClusterClient it is the
	// template of primaries' batchers, and serves the decisions whose
	// primary the slot map cannot name.
	batch     *batcher
	primaries primaries
	// noBatchScript keeps a batch's decisions in calls of their own (see
	// WithBatchScript); batchScript is its outcome on the client: a
	// batch's single decisions go as batch script calls, on a
	// *redis.Client one, on a ClusterClient in the tagged layout
	// (WithClusterTags) one per slot.
	noBatchScript, batchScript bool
	// failover is the client's failover machinery, nil when off: what the
	// calls wrote is journaled there (redis_journal.go).
	failover *failover.Client
}

// batcher makes concurrent decisions share round trips (see WithBatching).
// It owns no goroutine of its own: a pipeline is run by a goroutine started
// when a round trip is needed, which keeps taking what has queued meanwhile
// and ends as soon as nothing is waiting, so an idle store holds none and
// needs no Close.
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
func (r *road) batcherFor(ctx context.Context, c *call) *batcher {
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
func (r *road) send(ctx context.Context, c *call) error {
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
	r.refreshRouting(ctx.Err())
	return ctx.Err()
}

// await waits for c, which a goroutine of its own is running, until it is
// answered (nil) or ctx ends (ctx's error; c is abandoned to its runner).
func (r *road) await(ctx context.Context, c *call) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-c.done: // answered while the caller was leaving
		return nil
	default:
		r.refreshRouting(ctx.Err())
		return ctx.Err()
	}
}

// roundTripDone ends a lone call's round trip through b: the round trip
// goes to the calls that queued meanwhile, if any.
func (r *road) roundTripDone(b *batcher) {
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
func (r *road) pipelines(b *batcher, batch []*call) {
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

// runOne sends c alone under the caller's ctx.
func (r *road) runOne(ctx context.Context, c *call) {
	sc := [1]scriptCall{c.scriptCall()}
	r.roundTrip(ctx, sc[:])
	c.readReply(sc[0].cmd)
	c.era = eraOf(sc[0].args)
	r.journal(c)
}

// runBatch sends batch as one pipeline and signals every call. On a
// *redis.Client the single decisions among the calls travel as batch
// script calls of up to maxShared decisions (see WithBatchScript and
// shared), and its seat calls, and its admit calls, as one script call
// each (fold); on a ClusterClient in the tagged layout likewise for each
// slot; every other call is a script call of its own.
//
// The pipeline outlives any one caller's context: it runs until the latest
// deadline among its calls, or with none (the client's timeouts bound it)
// when one of them has none.
func (r *road) runBatch(batch []*call) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	var shares []*shared
	var folds []*fold
	var settles []*settleFold
	own := batch // the calls sent as script calls of their own
	if r.batchScript {
		shares, own = shareCalls(batch, r.cluster != nil)
		folds, own = foldCalls(own, r.cluster != nil)
		settles, own = foldSettles(own, r.cluster != nil)
	}
	sc := make([]scriptCall, 0, len(own)+len(shares)+len(folds)+len(settles))
	for _, c := range own {
		sc = append(sc, c.scriptCall())
	}
	for _, s := range shares {
		sc = append(sc, scriptCall{script: batchScript, args: s.args})
	}
	for _, f := range folds {
		sc = append(sc, f.sc)
	}
	for _, f := range settles {
		sc = append(sc, f.sc)
	}
	r.roundTrip(ctx, sc)
	for i, c := range own {
		c.readReply(sc[i].cmd)
		c.era = eraOf(sc[i].args)
	}
	for i, s := range shares {
		s.read(sc[len(own)+i].cmd)
		era := eraOf(sc[len(own)+i].args)
		for _, c := range s.calls {
			c.era = era
		}
	}
	for i, f := range folds {
		f.read(sc[len(own)+len(shares)+i].cmd)
		era := eraOf(sc[len(own)+len(shares)+i].args)
		for _, c := range f.calls {
			c.era = era
		}
	}
	for i, f := range settles {
		k := len(own) + len(shares) + len(folds) + i
		f.read(sc[k].cmd)
		era := eraOf(sc[k].args)
		for _, c := range f.calls {
			c.era = era
		}
	}
	r.journal(batch...)
	for _, c := range batch {
		c.done <- struct{}{}
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
