package store

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/flight"
)

// denyCache remembers recent denials, so that an identity over its limit
// costs Redis about two round trips per wait it names, however many callers
// it has, instead of one per caller. It never denies what Redis would admit:
// a wait counts from before the request was sent, a smaller cost or a
// request id goes to Redis, an admission ends the entry, and a larger cost
// is answered only when algo.RetryAfterFor knows its wait exactly. When an
// entry runs out, one request probes Redis while the others wait for it
// within their flight.Budget. docs/store.md has the reasoning.
type denyCache struct {
	seedA, seedB maphash.Seed
	epoch        time.Time // carries the monotonic clock reading
	shards       []denyShard
	mask         uint64
	// clock, when set, replaces the monotonic clock (tests).
	clock func() int64
}

// denyWays is the number of entries in one shard: a lookup compares at most
// this many under the shard's lock.
const denyWays = 8

type denyShard struct {
	mu      sync.Mutex
	entries [denyWays]denyEntry
	// forgot is just after a key of the shard was last forgotten (0:
	// never): a denial sent before then may describe a state given back
	// since, and is not remembered.
	forgot int64
	_      [64]byte // keeps neighbouring shards' locks off one cache line
}

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
	// probe is the one request sent to Redis after the entry ran out; nil
	// when none is in flight. It lands with its answer, or when the entry
	// ends.
	probe *flight.Flight
	// waiting counts the requests waiting for probe.
	waiting int64
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

// now is the monotonic time since the cache's epoch.
func (dc *denyCache) now() int64 {
	if dc.clock != nil {
		return dc.clock()
	}
	return int64(time.Since(dc.epoch))
}

// lock locks k's shard and returns it.
func (dc *denyCache) lock(k denyKey) *denyShard {
	s := &dc.shards[k.a&dc.mask]
	s.mu.Lock()
	return s
}

// find returns k's entry in s, which is locked, or nil. A key has one entry
// at most.
func (s *denyShard) find(k denyKey) *denyEntry {
	for i := range s.entries {
		if e := &s.entries[i]; e.used && e.key == k {
			return e
		}
	}
	return nil
}

// end forgets e, landing its probe for the requests waiting on it.
func (e *denyEntry) end() {
	if e.probe != nil {
		e.probe.Land()
	}
	*e = denyEntry{}
}

// retryAtFor returns when a cost at least e.cost fits, as Redis would say
// from the state it denied e.cost on, and whether the entry knows it
// exactly (algo.RetryAfterFor). Redis answers in whole microseconds.
func (e *denyEntry) retryAtFor(cost int64) (int64, bool) {
	const us = int64(time.Microsecond)
	p := algo.ParamsOf(tollgate.Request{Limit: e.limit, Cost: e.cost})
	wait, ok := algo.RetryAfterFor(e.limit.Algorithm, p, (e.retryAt-e.sent)/us, (e.resetAt-e.sent)/us, cost)
	return e.sent + wait*us, ok
}

// advice is what lookup tells a request to do.
type advice uint8

const (
	// adviceAsk: nothing remembered applies; ask Redis.
	adviceAsk advice = iota
	// adviceDenied: the remembered denial answers.
	adviceDenied
	// adviceProbe: the denial ran out and this request is the one that
	// asks Redis; it must record the answer when done.
	adviceProbe
	// adviceWait: another request is asking Redis; wait for its probe,
	// then look up again.
	adviceWait
)

// lookup says what to do with a request of cost under limit l for k. For
// adviceProbe it returns the probe the caller holds and must record; for
// adviceWait the probe to wait for. A request that may not wait (its
// flight.Budget is spent) is told to ask Redis instead of adviceWait.
//
// A request under another limit than the entry's is asked of Redis and
// ends the entry: it may change the shared state in a way the remembered
// wait does not account for (a faster refill, a larger burst).
func (dc *denyCache) lookup(k denyKey, l tollgate.Limit, cost int64, mayWait bool) (tollgate.Decision, advice, *flight.Flight) {
	now := dc.now()
	s := dc.lock(k)
	defer s.mu.Unlock()
	e := s.find(k)
	switch {
	case e == nil:
		return tollgate.Decision{}, adviceAsk, nil
	case e.limit != l:
		e.end()
		return tollgate.Decision{}, adviceAsk, nil
	case cost < e.cost:
		return tollgate.Decision{}, adviceAsk, nil
	case now < e.expires:
		retryAt, ok := e.retryAtFor(cost)
		if !ok {
			return tollgate.Decision{}, adviceAsk, nil
		}
		e.hits = min(e.hits+1, ^uint32(0)-1)
		return tollgate.Decision{
			Remaining:  e.remaining,
			RetryAfter: time.Duration(retryAt - now),
			ResetAfter: time.Duration(max(e.resetAt-now, 0)),
		}, adviceDenied, nil
	case e.probe != nil && !mayWait:
		return tollgate.Decision{}, adviceAsk, nil
	case e.probe != nil:
		e.waiting++
		return tollgate.Decision{}, adviceWait, e.probe
	}
	e.probe = flight.Start()
	return tollgate.Decision{}, adviceProbe, e.probe
}

// record records Redis's answer d to a request of cost under limit l for
// k, sent at sent (monotonic nanoseconds since the epoch, from dc.now): a
// denial is remembered, and an answer under another limit than the
// entry's ends the entry. probe, when not nil, is the probe the request
// held (from lookup): it lands, so the requests waiting for it look again.
// A request whose call failed records ok false: it only lands its probe.
func (dc *denyCache) record(k denyKey, l tollgate.Limit, cost, sent int64, d tollgate.Decision, ok bool, probe *flight.Flight) {
	now := dc.now()
	s := dc.lock(k)
	defer s.mu.Unlock()
	e := s.find(k)
	if e != nil {
		switch {
		case ok && e.limit != l:
			e.end()
			e = nil
		case probe != nil && e.probe == probe && ok && d.Allowed && d.Remaining >= e.cost*e.waiting:
			// The denial is over with room for every waiter: they go to
			// Redis together rather than one round trip after another.
			e.end()
			e = nil
		case probe != nil && e.probe == probe:
			e.probe.Land()
			e.probe, e.waiting = nil, 0
		case ok && d.Allowed && now < e.expires:
			// A smaller cost or a request id was admitted: the state the
			// entry describes is gone.
			e.end()
			e = nil
		}
	}
	if !ok || d.Allowed || sent < s.forgot {
		return
	}
	wait := int64(d.RetryAfter)
	expires := sent + min(wait-wait>>10, int64(maxDenyCacheTTL)) // less 1/1024 of the wait for a Redis clock running fast
	if wait <= 0 || expires <= now {
		return
	}
	fresh := denyEntry{
		key: k, limit: l, cost: cost, used: true,
		sent: sent, expires: expires, retryAt: sent + wait, resetAt: sent + int64(d.ResetAfter),
		remaining: d.Remaining,
	}
	if e != nil {
		// A live entry for a smaller cost covers more requests: keep it.
		if now < e.expires && e.cost < cost {
			return
		}
		fresh.hits, fresh.probe = e.hits, e.probe
		*e = fresh
		return
	}
	if v := s.victim(now); v != nil {
		*v = fresh
	}
}

// victim is the entry of s, which is locked, that a new denial replaces: an
// unused or expired one, else the live one that saved the fewest round
// trips; never one whose probe is in flight, whose waiters look it up
// again. nil when every entry has a probe in flight.
func (s *denyShard) victim(now int64) *denyEntry {
	var v *denyEntry
	for i := range s.entries {
		e := &s.entries[i]
		switch {
		case e.probe != nil:
		case !e.used || now >= e.expires:
			return e
		case v == nil || e.hits < v.hits:
			v = e
		}
	}
	return v
}

// ticket is a request's place in the deny cache between its lookup and
// Redis's answer: record records the answer. The zero ticket (no cache, or
// a request the cache does not see) records nothing.
type ticket struct {
	dc    *denyCache
	key   denyKey
	limit tollgate.Limit
	cost  int64
	sent  int64          // when the request went to Redis, from dc.now
	probe *flight.Flight // the probe the request holds, if any
}

// consult looks req (normalized, without a request id) up: a remembered
// denial answers it (denied true); while another request probes Redis for
// the identity it waits, within its flight.Budget, and looks again; ctx
// ending first returns ctx's error. Otherwise the request goes to Redis
// with the ticket consult returns. A nil cache returns the zero ticket.
func (dc *denyCache) consult(ctx context.Context, req tollgate.Request) (d tollgate.Decision, denied bool, tk ticket, err error) {
	if dc == nil {
		return d, false, tk, nil
	}
	k, l := dc.key(req.Key, req.Limit.Algorithm), req.Limit
	w := flight.NewWaiter(ctx)
	for {
		d, a, probe := dc.lookup(k, l, req.Cost, w.MayWait())
		switch a {
		case adviceDenied:
			return d, true, tk, nil
		case adviceWait:
			if err := w.Wait(probe); err != nil {
				return d, false, tk, err
			}
			continue
		}
		return d, false, ticket{dc: dc, key: k, limit: l, cost: req.Cost, sent: dc.now(), probe: probe}, nil
	}
}

// record records Redis's answer d to the ticket's request, ok false when
// the call failed.
func (tk *ticket) record(d tollgate.Decision, ok bool) {
	if tk.dc != nil {
		tk.dc.record(tk.key, tk.limit, tk.cost, tk.sent, d, ok, tk.probe)
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
	now := dc.now()
	s := dc.lock(k)
	defer s.mu.Unlock()
	e := s.find(k)
	return e != nil && e.limit == req.Limit && req.Cost >= e.cost && now < e.expires
}

// forget ends k's entry, if any: its state was reset or given back, so the
// remembered denial may no longer hold.
func (dc *denyCache) forget(k denyKey) {
	now := dc.now()
	s := dc.lock(k)
	defer s.mu.Unlock()
	s.forgot = now + 1
	if e := s.find(k); e != nil {
		e.end()
	}
}
