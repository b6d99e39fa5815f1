package store

import (
	"context"
	"hash/maphash"
	"math/bits"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
)

// DefaultDenyCacheSize is how many denials a Redis store remembers unless
// WithDenyCache says otherwise: about 4096 × 140 bytes of memory.
const DefaultDenyCacheSize = 4096

// MaxDenyCacheTTL is the longest a denial is repeated from memory, however
// long Redis said to wait: a key deleted by hand, or a Redis that lost its
// data, is noticed within it.
const MaxDenyCacheTTL = 10 * time.Second

// WithDenyCache sets how many denials the store remembers in process
// (rounded up to a multiple of denyWays; default DefaultDenyCacheSize); 0
// turns the cache off.
//
// While a denial Redis gave is in force, the store answers requests with the
// same Key and Limit and at least the same Cost from memory, with the
// RetryAfter and ResetAfter Redis would give for their Cost less the time
// since, or sends them to Redis when those cannot be known exactly. It never
// denies what Redis would admit; requests with a RequestID always go to
// Redis. Remaining is the remembered denial's. A denial is remembered at
// most MaxDenyCacheTTL, and when one runs out a single request asks Redis
// for the identity while the others wait for its answer. denyCache's
// comment has the reasoning.
func WithDenyCache(size int) RedisOption {
	return redisOption(func(r *Redis) {
		r.deny = nil
		if size > 0 {
			r.deny = newDenyCache(size)
		}
	})
}

// maxProbeWait bounds how long a request whose context has no deadline
// waits for other requests' probes (see probeWaitBudget).
const maxProbeWait = 50 * time.Millisecond

// probeWaitBudget is how long a request under ctx waits for other
// requests' probes, one after another, before it asks Redis itself: half
// the time its context has left, so that it still has time for its own
// round trip, or maxProbeWait without a deadline. A limit that frees a
// unit about every round trip admits each probe and lets the next go; its
// waiters would otherwise line up behind one probe after another until
// their deadlines.
func probeWaitBudget(ctx context.Context) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return maxProbeWait
	}
	return max(time.Until(deadline)/2, 0)
}

// denyWays is the number of entries in one shard: a lookup compares at most
// this many under the shard's lock.
const denyWays = 8

// denyKey identifies the Redis state of one identity under one algorithm:
// a 128-bit hash of the Key and the Algorithm with two seeds random to the
// process, so no caller can aim two identities at one key (two distinct
// identities share one with probability 2^-128). The limit is kept in the
// entry: requests under another limit share the state, so they are asked
// of Redis and end the entry (see lookup).
type denyKey struct{ a, b uint64 }

type denyEntry struct {
	key   denyKey
	limit tollgate.Limit
	// cost is the smallest cost denied: costs at least this are denied.
	cost int64
	// sent, expires, retryAt and resetAt are monotonic nanoseconds since
	// the cache's epoch: when the denied request was sent, when the entry
	// stops answering, and sent plus the RetryAfter and ResetAfter Redis
	// gave; expires ≤ retryAt.
	sent, expires, retryAt, resetAt int64
	remaining                       int64
	// hits counts the round trips the entry saved.
	hits uint32
	used bool
	// probe is closed when the one request sent to Redis after the entry
	// ran out has its answer, or when the entry ends; nil when none is in
	// flight.
	probe chan struct{}
	// waiting counts the requests waiting on probe.
	waiting int64
}

type denyShard struct {
	mu      sync.Mutex
	entries [denyWays]denyEntry
	_       [64]byte // keeps neighbouring shards' locks off one cache line
}

// denyCache remembers recent denials so that an identity over its limit
// costs Redis about two round trips per wait it names, however many callers
// it has, instead of one per caller.
//
// It never denies what Redis would admit:
//
//   - a denial's wait d is counted from before the request was sent, on the
//     monotonic clock, less 1/1024 of d for a Redis clock running fast;
//     Redis counted it from when the script ran, later. Nothing but other
//     requests' debits changes what a cost needs before then, and those only
//     delay it.
//   - a smaller cost, which may fit, goes to Redis; so does a request with a
//     RequestID, which may replay an earlier admission.
//   - an admission seen by this store for the identity (a smaller cost, a
//     request id) ends the entry: the state it describes has changed.
//
// Answers are exact for the costs it answers (see retryAtFor): a larger cost
// than the one denied needs longer, and how much longer follows from the
// remembered answer alone when the difference is a whole number of
// microseconds, for every algorithm in the cases retryAtFor lists. A
// request it cannot answer exactly goes to Redis.
//
// When a remembered denial runs out, one request (the probe) goes to Redis
// for the identity while the others with a cost the entry covered wait for
// its answer (no longer than their contexts allow): a denial starts a new
// entry that answers them all; an admission that leaves too little for the
// cost the entry covered times the waiters lets the next one go; one that
// leaves that much ends the entry and lets them all go. A request waits for
// probes, one after another, for half the time its context has left at most
// (50ms without a deadline); then it asks Redis itself, so a limit that
// frees a unit about every round trip, whose probes are all admitted, never
// holds its callers until their deadlines.
//
// A repeated denial reports the Remaining of the denial it repeats (the
// bucket may have refilled a little, or other requests used some, since).
//
// The guarantee assumes an identity is limited under one Limit at a time,
// as a rule is. When an identity's limit changes, its state in Redis keeps
// the expiry the old limit wrote, so Redis itself answers inconsistently
// until it passes; a request under the new limit ends the entry in this
// store, but a denial remembered elsewhere can be repeated until its wait
// ends (at most MaxDenyCacheTTL). Likewise Reset, and the refund of a
// denied AllowAll set's debits, end the entries of this store only. Debits
// by other processes are unknown here: until the entry runs out, its
// answers are those of the state it saw, which those debits only make
// longer.
//
// Only denied identities enter the cache, and an identity is denied only
// after it used its quota, so fresh identities never push entries out. The
// cache is sharded; within a shard an entry is replaced only when it has
// expired or, when none has, the one that saved the fewest round trips, so
// a flood of denied identities cannot push out a hot identity's entry,
// which saves one round trip per request.
type denyCache struct {
	seedA, seedB maphash.Seed
	epoch        time.Time // carries the monotonic clock reading
	shards       []denyShard
	mask         uint64
	// clock, when set, replaces the monotonic clock (tests).
	clock func() int64
}

func newDenyCache(size int) *denyCache {
	n := 1
	for n*denyWays < size {
		n <<= 1
	}
	return &denyCache{
		seedA:  maphash.MakeSeed(),
		seedB:  maphash.MakeSeed(),
		epoch:  time.Now(),
		shards: make([]denyShard, n),
		mask:   uint64(n - 1),
	}
}

// stateKey is what one Redis state belongs to.
type stateKey struct {
	key string
	alg tollgate.Algorithm
}

func (dc *denyCache) key(identity string, alg tollgate.Algorithm) denyKey {
	k := stateKey{identity, alg}
	return denyKey{maphash.Comparable(dc.seedA, k), maphash.Comparable(dc.seedB, k)}
}

// end forgets e, waking the requests waiting on its probe.
func (e *denyEntry) end() {
	if e.probe != nil {
		close(e.probe)
	}
	*e = denyEntry{}
}

// now is the monotonic time since the cache's epoch.
func (dc *denyCache) now() int64 {
	if dc.clock != nil {
		return dc.clock()
	}
	return int64(time.Since(dc.epoch))
}

// verdict is what lookup tells a request.
type verdict uint8

const (
	// verdictAsk: nothing remembered applies; ask Redis.
	verdictAsk verdict = iota
	// verdictDenied: the remembered denial answers.
	verdictDenied
	// verdictProbe: the denial ran out and this request is the one that
	// asks Redis; it must call settle when done.
	verdictProbe
	// verdictWait: another request is asking Redis; wait on the channel,
	// then look up again.
	verdictWait
)

// lookup says what to do with a request of cost under limit l for k. For
// verdictProbe it returns the probe the caller holds and must settle; for
// verdictWait the probe to wait on. A request that may not wait (it spent
// its probeWaitBudget) is told to ask Redis instead of verdictWait.
//
// A request under another limit than the entry's is asked of Redis and
// ends the entry: it may change the shared state in a way the remembered
// wait does not account for (a faster refill, a larger burst).
func (dc *denyCache) lookup(k denyKey, l tollgate.Limit, cost int64, mayWait bool) (tollgate.Decision, verdict, chan struct{}) {
	s := &dc.shards[k.a&dc.mask]
	now := dc.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.entries {
		e := &s.entries[i]
		if !e.used || e.key != k {
			continue
		}
		switch {
		case e.limit != l:
			e.end()
			return tollgate.Decision{}, verdictAsk, nil
		case cost < e.cost:
			return tollgate.Decision{}, verdictAsk, nil
		case now < e.expires:
			retryAt, ok := e.retryAtFor(cost)
			if !ok {
				return tollgate.Decision{}, verdictAsk, nil
			}
			e.hits = min(e.hits+1, ^uint32(0)-1)
			return tollgate.Decision{
				Remaining:  e.remaining,
				RetryAfter: time.Duration(retryAt - now),
				ResetAfter: time.Duration(max(e.resetAt-now, 0)),
			}, verdictDenied, nil
		case e.probe != nil && !mayWait:
			return tollgate.Decision{}, verdictAsk, nil
		case e.probe != nil:
			e.waiting++
			return tollgate.Decision{}, verdictWait, e.probe
		}
		e.probe = make(chan struct{})
		return tollgate.Decision{}, verdictProbe, e.probe
	}
	return tollgate.Decision{}, verdictAsk, nil
}

// retryAtFor returns when a cost at least e.cost fits, as Redis would say
// from the state it denied e.cost on, and whether that is known exactly
// from the remembered answer. Every algorithm's wait is, for the state of a
// denial,
//
//   - for the whole capacity, the time until the identity is full again:
//     ResetAfter;
//   - for a fixed window, the end of the window, whatever the cost;
//   - for a token bucket or GCRA, ⌈x + cost·Period/Rate⌉ for some x fixed
//     by the state, so two costs whose difference takes a whole number m of
//     microseconds (cost·Period divisible by Rate) wait m apart: from the
//     denied cost, or back from the capacity's wait.
//
// A sliding window's wait depends on both windows' counts: see
// slidingRetryAt for when the answer tells enough.
func (e *denyEntry) retryAtFor(cost int64) (int64, bool) {
	l := e.limit
	switch {
	case cost == e.cost:
		return e.retryAt, true
	case cost == l.Capacity():
		return e.resetAt, true
	case l.Algorithm == tollgate.FixedWindow:
		return e.retryAt, true
	case l.Algorithm == tollgate.TokenBucket || l.Algorithm == tollgate.GCRA:
		period := l.Period.Microseconds()
		if m, r := algo.MulDiv(cost-e.cost, period, l.Rate); r == 0 {
			return e.retryAt + m*int64(time.Microsecond), true
		}
		if m, r := algo.MulDiv(l.Capacity()-cost, period, l.Rate); r == 0 {
			return e.resetAt - m*int64(time.Microsecond), true
		}
	case l.Algorithm == tollgate.SlidingWindow:
		return e.slidingRetryAt(cost)
	}
	return 0, false
}

// slidingRetryAt is retryAtFor for a sliding window (lua/sliding_window.lua),
// in the two cases where one unknown count decides every cost's wait. With
// P the period and e the time into the current window when Redis denied:
//
//   - nothing counted in the current window (ResetAfter = P − e ≤ P): a cost
//     c waits P − e − ⌊(Rate − c)·P/x⌋, x the previous window's count;
//   - the denied cost fits only in the next window (RetryAfter > P − e, so
//     ResetAfter = 2P − e): c waits 2P − e − ⌊(Rate − c)·P/x⌋, x the current
//     window's count, for every larger cost too.
//
// Both read ResetAfter − ⌊(Rate − c)·P/x⌋. The denied cost's wait gives
// m = ⌊(Rate − e.cost)·P/x⌋, so x lies in an interval; the wait for cost is
// known when ⌊(Rate − cost)·P/x⌋, which only falls as x grows, is the same
// at both ends of it. Otherwise (the current window's count fits, and the
// previous one's too decides) it goes to Redis.
func (e *denyEntry) slidingRetryAt(cost int64) (int64, bool) {
	const us = int64(time.Microsecond)
	l := e.limit
	period := l.Period.Microseconds()
	retry, reset := (e.retryAt-e.sent)/us, (e.resetAt-e.sent)/us
	if reset > period && retry <= reset-period {
		return 0, false
	}
	a, b := l.Rate-e.cost, l.Rate-cost
	m := reset - retry
	lo := floorAtMost(a, period, m+1, l.Rate) + 1
	hi := l.Rate
	if m > 0 {
		hi = floorAtMost(a, period, m, l.Rate)
	}
	if lo > hi {
		return 0, false
	}
	wait := floorAtMost(b, period, lo, m)
	if wait != floorAtMost(b, period, hi, m) {
		return 0, false
	}
	return e.sent + (reset-wait)*us, true
}

// floorAtMost returns min(⌊a·b/d⌋, limit) for a, b ≥ 0 and d > 0, whatever
// the size of the quotient.
func floorAtMost(a, b, d, limit int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(d) {
		return limit // the quotient is 2^64 or more
	}
	q, _ := bits.Div64(hi, lo, uint64(d))
	return int64(min(q, uint64(limit)))
}

// settle records Redis's answer d to a request of cost under limit l for
// k, sent at sent (monotonic nanoseconds since the epoch, from dc.now): a
// denial is remembered, and an answer under another limit than the
// entry's ends the entry. probe, when not nil, is the probe the request
// held (from lookup): it ends, so the requests waiting on it look again. A
// request whose call failed settles with ok false: it only ends its probe.
func (dc *denyCache) settle(k denyKey, l tollgate.Limit, cost, sent int64, d tollgate.Decision, ok bool, probe chan struct{}) {
	s := &dc.shards[k.a&dc.mask]
	now := dc.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	slot := -1
	for i := range s.entries {
		if e := &s.entries[i]; e.used && e.key == k {
			slot = i
			break
		}
	}
	if slot >= 0 {
		e := &s.entries[slot]
		switch {
		case ok && e.limit != l:
			e.end()
			slot = -1
		case probe != nil && e.probe == probe && ok && d.Allowed && d.Remaining >= e.cost*e.waiting:
			// The denial is over with room for every waiter: they go to
			// Redis together rather than one round trip after another.
			e.end()
			slot = -1
		case probe != nil && e.probe == probe:
			close(e.probe)
			e.probe, e.waiting = nil, 0
		case ok && d.Allowed && now < e.expires:
			// A smaller cost or a request id was admitted: the state the
			// entry describes is gone.
			e.end()
			slot = -1
		}
	}
	if !ok || d.Allowed {
		return
	}
	wait := int64(d.RetryAfter)
	expires := sent + min(wait-wait>>10, int64(MaxDenyCacheTTL))
	if wait <= 0 || expires <= now {
		return
	}
	e := denyEntry{
		key: k, limit: l, cost: cost, used: true,
		sent: sent, expires: expires, retryAt: sent + wait, resetAt: sent + int64(d.ResetAfter),
		remaining: d.Remaining,
	}
	if slot >= 0 {
		old := &s.entries[slot]
		// A live entry for a smaller cost covers more requests: keep it.
		if now < old.expires && old.cost < cost {
			return
		}
		e.hits, e.probe = old.hits, old.probe
		*old = e
		return
	}
	// Evict an unused or expired entry, else the live one that saved the
	// fewest round trips; never one whose probe is in flight: its waiters
	// look it up again.
	victim := -1
	for i := range s.entries {
		old := &s.entries[i]
		switch {
		case old.probe != nil:
		case !old.used || now >= old.expires:
			victim = i
		case victim < 0 || s.entries[victim].used && now < s.entries[victim].expires && old.hits < s.entries[victim].hits:
			victim = i
		}
		if victim >= 0 && (!s.entries[victim].used || now >= s.entries[victim].expires) {
			break
		}
	}
	if victim >= 0 {
		s.entries[victim] = e
	}
}

// ticket is a request's place in the deny cache between its lookup and
// Redis's answer: settle records the answer. The zero ticket (no cache, or
// a request the cache does not see) settles nothing.
type ticket struct {
	dc    *denyCache
	key   denyKey
	limit tollgate.Limit
	cost  int64
	sent  int64         // when the request went to Redis, from dc.now
	probe chan struct{} // the probe the request holds, if any
}

// consult looks req (normalized, without a request id) up: a remembered
// denial answers it (denied true); while another request probes Redis for
// the identity it waits, within its probeWaitBudget, and looks again; ctx
// ending first returns ctx's error. Otherwise the request goes to Redis
// with the ticket consult returns. A nil cache returns the zero ticket.
func (dc *denyCache) consult(ctx context.Context, req tollgate.Request) (d tollgate.Decision, denied bool, tk ticket, err error) {
	if dc == nil {
		return d, false, tk, nil
	}
	k, l := dc.key(req.Key, req.Limit.Algorithm), req.Limit
	waitUntil := int64(-1)
	for {
		d, v, wait := dc.lookup(k, l, req.Cost, waitUntil < 0 || dc.now() < waitUntil)
		if v == verdictDenied {
			return d, true, tk, nil
		}
		if v != verdictWait {
			return d, false, ticket{dc: dc, key: k, limit: l, cost: req.Cost, sent: dc.now(), probe: wait}, nil
		}
		if waitUntil < 0 {
			waitUntil = dc.now() + int64(probeWaitBudget(ctx))
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return d, false, tk, ctx.Err()
		}
	}
}

// settle records Redis's answer d to the ticket's request, ok false when
// the call failed.
func (tk *ticket) settle(d tollgate.Decision, ok bool) {
	if tk.dc != nil {
		tk.dc.settle(tk.key, tk.limit, tk.cost, tk.sent, d, ok, tk.probe)
	}
}

// remembers reports whether a denial of req (normalized) is remembered and
// still in force, without probing or waiting: AllowAll uses it to judge a
// set it knows will be denied without debiting the set's other parts.
func (dc *denyCache) remembers(req tollgate.Request) bool {
	if dc == nil {
		return false
	}
	k := dc.key(req.Key, req.Limit.Algorithm)
	s := &dc.shards[k.a&dc.mask]
	now := dc.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.entries {
		if e := &s.entries[i]; e.used && e.key == k {
			return e.limit == req.Limit && req.Cost >= e.cost && now < e.expires
		}
	}
	return false
}

// forget ends k's entry, if any: its state was reset or given back, so the
// remembered denial may no longer hold.
func (dc *denyCache) forget(k denyKey) {
	s := &dc.shards[k.a&dc.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.entries {
		if e := &s.entries[i]; e.used && e.key == k {
			e.end()
		}
	}
}
