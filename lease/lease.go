// Package lease is an opt-in local tier for hot identities: a
// tollgate.Store that wraps another (usually the Redis store) and, for an
// identity decided often enough, takes a lease of units from it in one
// decision, then admits from that lease in process without a round trip.
//
// A lease is an ordinary admitted decision on the inner store with Cost
// equal to the lease's size, so every unit is debited in the shared store
// before this replica spends it: the tier never admits more than the inner
// store granted. Units a replica does not spend within the lease lifetime
// are lost to the identity (the Store interface has no refund); a lease
// never exceeds a small share of the limit's capacity, so what is lost or
// held is bounded. Cold identities, requests carrying a RequestID and
// limits too small to share go straight to the inner store.
//
// See docs/local-tier.md for when to use it and its exact bounds.
package lease

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/internal/flight"
)

// Store is a tollgate.Store that admits hot identities from leases taken
// from an inner Store and sends every other decision to it (see the
// package documentation).
//
// A decision admitted from a lease reports Remaining as the units left in
// this replica's lease plus the inner store's Remaining when the lease was
// taken (so it counts neither the refill since nor what other replicas
// spent since, and is at most the lease lifetime old), RetryAfter 0, and
// ResetAfter as the inner store's ResetAfter at the lease less the time
// since. Denials always come from the inner store, with its RetryAfter.
//
// A Store starts no goroutine and holds leases for at most WithMaxLeases
// identities, two at most for each (the one being spent and the next); it
// is safe for concurrent use.
type Store struct {
	inner tollgate.Store
	cfg   config
	epoch time.Time // clock readings are nanoseconds since epoch
	hot   hotCounter

	mu      sync.RWMutex
	entries map[leaseKey]*entry

	// resets counts Reset calls begun and ended, and resetting those under
	// way: a lease asked for while a Reset of its identity may have run is
	// not kept (see Reset).
	resets, resetting atomic.Int64
	// fullUntil: until then the table is full of entries that are not
	// idle, and new hot identities are decided on the inner store.
	fullUntil atomic.Int64
}

// leaseKey is one identity under one Limit: a lease is spent only under
// the limit it was taken with.
type leaseKey struct {
	key   string
	limit tollgate.Limit
}

// entry is one hot identity's leases and the state sizing the next one.
type entry struct {
	// cur is the lease being spent; nil before the first and after Reset.
	// next is the lease asked for ahead of need (see prefetch), spent once
	// cur cannot pay. A lease is replaced whole, so a caller holding an old
	// one can only spend units that one was granted.
	cur, next atomic.Pointer[grant]
	// leasedAt is when a lease was last asked for: entries that stopped
	// asking are evicted first.
	leasedAt atomic.Int64

	mu sync.Mutex
	// fetching is the lease one caller is asking for, landed when it
	// arrives (or is refused); nil when none is being asked for. Only one
	// caller per identity asks at a time; the others wait for its answer.
	fetching *flight.Flight
	// ceiling is the largest lease to ask for next: the limit's share at
	// first, halved (and capped at the store's Remaining) by a refusal,
	// doubled by each grant.
	ceiling int64
	// directUntil: until then the identity is decided on the inner store
	// one request at a time, because leases as small as minLease were
	// refused (the identity is at its limit).
	directUntil int64
}

// grant is one lease: units debited on the inner store, spent here.
type grant struct {
	units      atomic.Int64 // left to spend
	size       int64        // granted
	low        int64        // below this many units left, the next lease is asked for
	taken      int64        // when it was asked for (the debit is later)
	expires    int64        // no unit is spent from then on
	remaining  int64        // the inner store's Remaining after the debit
	resetAfter int64        // the inner store's ResetAfter, nanoseconds
}

// New returns a Store admitting hot identities from leases of inner. An
// invalid option is an error naming it.
func New(inner tollgate.Store, opts ...Option) (*Store, error) {
	if check.Nil(inner) {
		return nil, errors.New("lease: the inner store is nil")
	}
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{inner: inner, cfg: cfg, epoch: cfg.clock(), entries: make(map[leaseKey]*entry)}
	s.hot.seed = maphash.MakeSeed()
	s.hot.n = cfg.hotN
	s.hot.interval = int64(cfg.hotInterval)
	return s, nil
}

func (s *Store) now() int64 { return int64(s.cfg.clock().Sub(s.epoch)) }

// maxLease is the largest lease under l: its share of the capacity.
func (s *Store) maxLease(l tollgate.Limit) int64 {
	return int64(float64(l.Capacity()) * s.cfg.maxShare)
}

// Allow decides req: from this replica's lease when its identity is hot,
// otherwise on the inner store. A request carrying a RequestID goes to the
// inner store, which alone knows whether that id was admitted on another
// replica, unless WithDebitRetriesWhenHot says otherwise.
func (s *Store) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	if req.RequestID != "" && !s.cfg.debitRetries {
		return s.inner.Allow(ctx, req)
	}
	if err := check.NormalizeInPlace(&req); err != nil {
		return tollgate.Decision{}, err
	}
	maxSize := s.maxLease(req.Limit)
	if maxSize < minLease || req.Cost > maxSize {
		return s.inner.Allow(ctx, req)
	}
	k := leaseKey{req.Key, req.Limit}
	now := s.now()
	s.mu.RLock()
	e := s.entries[k]
	s.mu.RUnlock()
	if e == nil {
		if !s.hot.hit(req.Key, req.Limit.Algorithm, now) {
			return s.inner.Allow(ctx, req)
		}
		if e = s.enter(k, maxSize, now); e == nil {
			return s.inner.Allow(ctx, req) // no room: decided as without the tier
		}
	}
	for {
		g := e.cur.Load()
		if g != nil && now < g.expires {
			if left, ok := g.spend(req.Cost); ok {
				if left < g.low && left+req.Cost >= g.low {
					// This request took the lease below its low-water mark:
					// its caller asks for the next one while the others
					// spend the rest.
					s.prefetch(ctx, e, g, req, maxSize, now)
				}
				return g.decision(left, now), nil
			}
		}
		if n := e.next.Load(); n != nil {
			// The current lease cannot pay: the next one takes its place.
			// It leaves e.next once it is current (moved by this
			// caller or another) or expired, never otherwise: a caller
			// holding a stale current lease must not drop a next one
			// taken after it.
			expired := now >= n.expires
			if expired || (n != g && e.cur.CompareAndSwap(g, n)) || e.cur.Load() == n {
				e.next.CompareAndSwap(n, nil)
			}
			continue
		}
		d, again, err := s.renew(ctx, k, e, req, maxSize, now)
		if !again {
			return d, err
		}
		now = s.now()
	}
}

// spend takes cost units from the lease, reporting the units left, or
// false when fewer than cost are left.
func (g *grant) spend(cost int64) (int64, bool) {
	for {
		u := g.units.Load()
		if u < cost {
			return 0, false
		}
		if g.units.CompareAndSwap(u, u-cost) {
			return u - cost, true
		}
	}
}

// decision is the answer to a request admitted from g with left units
// left in it, at now.
func (g *grant) decision(left, now int64) tollgate.Decision {
	return tollgate.Decision{
		Allowed:    true,
		Remaining:  left + g.remaining,
		ResetAfter: time.Duration(max(g.resetAfter-(now-g.taken), 0)),
	}
}

// renew runs when e's leases cannot pay for req: it waits for the lease
// another caller is asking for (within its flight.Budget), asks for one
// itself, or decides req on the inner store. again reports that the caller
// should try e's leases anew.
func (s *Store) renew(ctx context.Context, k leaseKey, e *entry, req tollgate.Request, maxSize, now int64) (d tollgate.Decision, again bool, err error) {
	e.mu.Lock()
	if e.canPay(req.Cost, now) {
		e.mu.Unlock()
		return d, true, nil // renewed while this caller waited for the lock
	}
	if f := e.fetching; f != nil {
		e.mu.Unlock()
		w := flight.NewWaiter(ctx)
		landed, err := w.WaitWithin(f)
		switch {
		case err != nil:
			return d, false, fmt.Errorf("lease: waiting for the lease another request is asking for: %w", err)
		case landed:
			return d, true, nil
		}
		// The lease is slow to come: this request is decided alone.
		d, err = s.inner.Allow(ctx, req)
		return d, false, err
	}
	if now < e.directUntil {
		e.mu.Unlock()
		d, err = s.inner.Allow(ctx, req)
		return d, false, err
	}
	size, cold := s.nextSize(e, req.Cost, maxSize, now)
	if cold {
		e.mu.Unlock()
		s.drop(k, e)
		d, err = s.inner.Allow(ctx, req)
		return d, false, err
	}
	if size < req.Cost || size < minLease {
		e.mu.Unlock()
		d, err = s.inner.Allow(ctx, req)
		return d, false, err
	}
	g, ld, err := s.fetch(ctx, e, req, size, maxSize, now, req.Cost)
	switch {
	case err != nil:
		return d, false, err
	case g == nil && ld.Allowed:
		// A Reset ran meanwhile: this request counts as decided before it.
		return tollgate.Decision{Allowed: true, Remaining: ld.Remaining, ResetAfter: ld.ResetAfter}, false, nil
	case g == nil:
		d, err = s.inner.Allow(ctx, req)
		return d, false, err
	}
	return g.decision(size-req.Cost, s.now()), false, nil
}

// canPay reports whether e's current or next lease can pay cost at now.
func (e *entry) canPay(cost, now int64) bool {
	for _, g := range []*grant{e.cur.Load(), e.next.Load()} {
		if g != nil && now < g.expires && g.units.Load() >= cost {
			return true
		}
	}
	return false
}

// prefetch asks for e's next lease on behalf of the caller that took g
// below its low-water mark, unless a lease is already on its way or held.
// Its outcome only shapes later leases: the caller is admitted already.
func (s *Store) prefetch(ctx context.Context, e *entry, g *grant, req tollgate.Request, maxSize, now int64) {
	if e.next.Load() != nil {
		return
	}
	e.mu.Lock()
	if e.fetching != nil || e.next.Load() != nil || e.cur.Load() != g || now < e.directUntil {
		e.mu.Unlock()
		return
	}
	size, _ := s.nextSize(e, 1, maxSize, now)
	if size < minLease {
		e.mu.Unlock()
		return
	}
	_, _, _ = s.fetch(ctx, e, req, size, maxSize, now, 0)
}

// fetch asks the inner store for a lease of size for e, on behalf of a
// request paying cost from it (0 for a prefetch, which goes to e.next).
// It is called with e.mu held and releases it. It returns the lease
// installed, or nil when the lease was refused (ld tells why) or taken
// while a Reset may have run (then ld is its admission, and the rest of
// the lease is lost). e's ceiling and direct mode follow the answer.
func (s *Store) fetch(ctx context.Context, e *entry, req tollgate.Request, size, maxSize, now, cost int64) (g *grant, ld tollgate.Decision, err error) {
	f := flight.Start()
	e.fetching = f
	e.leasedAt.Store(now)
	e.mu.Unlock()

	resets := s.resets.Load()
	ld, err = s.inner.Allow(ctx, tollgate.Request{Key: req.Key, Limit: req.Limit, Cost: size})
	after := s.now()

	e.mu.Lock()
	defer func() {
		e.fetching = nil
		f.Land()
		e.mu.Unlock()
	}()
	if err != nil {
		return nil, ld, err
	}
	if !ld.Allowed {
		// Too few units for this lease: the next is smaller, never above
		// what the store has left, and when even minLease does not fit the
		// identity is at its limit, decided one request at a time for a
		// while so it still gets every unit there is.
		e.ceiling = min(size/2, ld.Remaining)
		if floor := max(minLease, req.Cost); e.ceiling < floor {
			e.ceiling = floor
			e.directUntil = after + int64(s.cfg.lifetime/4)
		}
		return nil, ld, nil
	}
	e.ceiling = min(max(e.ceiling, size)*2, maxSize)
	g = &grant{size: size, low: size / 4, taken: now, expires: now + int64(s.cfg.lifetime),
		remaining: ld.Remaining, resetAfter: int64(ld.ResetAfter)}
	// A window's units are spent within the window that counted them.
	switch req.Limit.Algorithm {
	case tollgate.FixedWindow:
		g.expires = min(g.expires, now+int64(ld.ResetAfter))
	case tollgate.SlidingWindow:
		g.expires = min(g.expires, now+int64(ld.ResetAfter-req.Limit.Period))
	}
	if s.resetting.Load() != 0 || s.resets.Load() != resets {
		return nil, ld, nil
	}
	g.units.Store(size - cost)
	if cost == 0 {
		e.next.Store(g)
	} else {
		e.cur.Store(g)
	}
	return g, ld, nil
}

// nextSize is the size of the lease e asks for next, for a request of
// cost: about a quarter of the lifetime's worth of units at the rate the
// identity spent its current lease, at most four times that lease, at most
// the ceiling. cold reports that the lease expired at a rate that is no
// longer hot: the identity goes back to the inner store.
func (s *Store) nextSize(e *entry, cost, maxSize, now int64) (size int64, cold bool) {
	quarter := float64(s.cfg.lifetime / 4)
	var target float64
	if g := e.cur.Load(); g == nil {
		// Just turned hot: more than hotN decisions within one interval.
		target = float64(s.cfg.hotN+1) / float64(s.cfg.hotInterval) * quarter
	} else {
		used := g.size - max(g.units.Load(), 0)
		rate := float64(used) / float64(max(now-g.taken, 1))
		if now >= g.expires && rate*float64(s.cfg.hotInterval) <= float64(s.cfg.hotN) {
			return 0, true
		}
		target = min(rate*quarter, 4*float64(g.size))
	}
	size = max(int64(min(target, float64(maxSize))), minLease, cost)
	return min(size, e.ceiling, maxSize), false
}

// enter returns k's entry, creating it, or nil when the table is full of
// entries that asked for a lease within the last lifetime. An entry that
// did not is idle: its leases have expired, so evicting it (the one idle
// longest) loses no unit. A full table is not scanned again until its
// oldest entry can be idle.
func (s *Store) enter(k leaseKey, maxSize, now int64) *entry {
	if now < s.fullUntil.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[k]; e != nil {
		return e
	}
	if len(s.entries) >= s.cfg.maxLeases {
		var oldest leaseKey
		at := int64(0)
		first := true
		for k, e := range s.entries {
			if t := e.leasedAt.Load(); first || t < at {
				oldest, at, first = k, t, false
			}
		}
		if idleAt := at + int64(s.cfg.lifetime); now < idleAt {
			s.fullUntil.Store(idleAt)
			return nil
		}
		delete(s.entries, oldest)
	}
	e := &entry{ceiling: maxSize}
	e.leasedAt.Store(now)
	s.entries[k] = e
	return e
}

// drop removes k's entry if it is still e.
func (s *Store) drop(k leaseKey, e *entry) {
	s.mu.Lock()
	if s.entries[k] == e {
		delete(s.entries, k)
		s.fullUntil.Store(0) // a place is free
	}
	s.mu.Unlock()
}

// AllowAll passes the set to the inner store: a set is decided all or
// nothing there, which a lease cannot take part in.
func (s *Store) AllowAll(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	return s.inner.AllowAll(ctx, reqs)
}

// Peek passes req to the inner store. Units leased by any replica and not
// spent yet count there as spent.
func (s *Store) Peek(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	return s.inner.Peek(ctx, req)
}

// Reset drops this replica's leases of req's Key under req's algorithm
// (any limit), then resets the identity on the inner store. A lease being
// asked for meanwhile is not kept. Leases other replicas hold are theirs
// to spend until they expire.
func (s *Store) Reset(ctx context.Context, req tollgate.Request) error {
	s.resetting.Add(1)
	s.resets.Add(1)
	defer func() {
		s.resets.Add(1)
		s.resetting.Add(-1)
	}()
	s.mu.Lock()
	for k, e := range s.entries {
		if k.key == req.Key && k.limit.Algorithm == req.Limit.Algorithm {
			delete(s.entries, k)
			s.fullUntil.Store(0)
			for _, p := range []*atomic.Pointer[grant]{&e.cur, &e.next} {
				if g := p.Swap(nil); g != nil {
					g.units.Store(0)
				}
			}
		}
	}
	s.mu.Unlock()
	return s.inner.Reset(ctx, req)
}

var _ tollgate.Settler = (*Store)(nil)
