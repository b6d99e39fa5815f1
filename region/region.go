package region

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/check"
)

// Region is a tollgate.Store that decides every request on this region's
// store under this region's share of the request's global limit, and
// renews its shares with the Home from a goroutine it owns until Close.
//
// A region is as many processes as it runs: each makes its own Region
// with the same Config, on the region's own store (one Redis), and
// reports to the Home as a member of the region. The Home sums their
// demands, grants each the region's share, and counts the region for the
// largest share one of them holds; they decide on the same keys of the
// region's store, so together they admit the region's share once.
//
// A decision is the local store's, made under a local limit standing for
// the share: a token bucket of the share's rate and its part of the burst,
// or a fixed window of the share's units. Its Remaining, RetryAfter and
// ResetAfter are the local store's under that limit. A request whose cost
// exceeds what the share holds at once is denied without a store call,
// with a RetryAfter of one rebalance interval; an Overdraw request (hits
// counted after the fact) is debited all the same, and the region's share
// pays the debt back. Request ids are the local
// store's: a retry is replayed within one region, and debited again in
// another.
type Region struct {
	local  tollgate.Store
	home   Home
	s      settings
	member string       // this process among the region's: the name and a random suffix
	seq    atomic.Int64 // the last report's number

	entries sync.Map     // entryKey -> *entry
	count   atomic.Int64 // entries held
	floors  map[*shared]*entry

	metrics *instruments
	cancel  context.CancelFunc
	done    chan struct{}

	// trace, when set (by tests), is told of every plan the coordinator
	// takes, as it takes it.
	trace atomic.Pointer[func(key string, l tollgate.Limit, p *plan)]
}

// entryKey names an identity under one global limit.
type entryKey struct {
	key string
	sh  *shared
}

// entry is the region's share of one identity under one global limit.
type entry struct {
	key  string
	sh   *shared
	plan atomic.Pointer[plan]
	// asked counts the units decisions asked for since the last report,
	// requests the decisions.
	asked, requests atomic.Int64
	// demand is the demand last reported.
	demand atomic.Int64

	// The coordinator's alone: when the demand was last measured, for how
	// many reports in a row nothing was asked, the window and the use it
	// last reported (a window), and the plans replaced by smaller ones
	// that decisions may still read, until they drain.
	since      time.Time
	asks       demand
	idle       int
	lastWindow int64
	lastUsed   int64
	lowered    []*plan
}

var (
	_ tollgate.Store     = (*Region)(nil)
	_ tollgate.InProcess = (*Region)(nil)
)

// New returns the Region c names, deciding on local and coordinating
// through home, and starts the goroutine that renews its shares every
// c.Rebalance (Close stops it). A Config it cannot run with is an error
// wrapping ErrInvalidConfig, and nothing is written anywhere.
func New(local tollgate.Store, home Home, c Config) (*Region, error) {
	if check.Nil(local) || check.Nil(home) {
		return nil, configErr("the local store (%T) and the home (%T) must not be nil", local, home)
	}
	s, err := c.check()
	if err != nil {
		return nil, err
	}
	m, err := newInstruments(c.MeterProvider)
	if err != nil {
		return nil, configErr("metrics: %v", err)
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails
	r := &Region{local: local, home: home, s: s, member: s.name + "/" + hex.EncodeToString(id[:]),
		floors: make(map[*shared]*entry), metrics: m, done: make(chan struct{})}
	for _, sh := range s.limits {
		e := &entry{sh: sh}
		e.plan.Store(newPlan(sh.floor, -1, time.Time{}, time.Time{}))
		r.floors[sh] = e
	}
	if err := m.observe(r); err != nil {
		return nil, configErr("metrics: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.loop(ctx)
	return r, nil
}

// Close stops the goroutine renewing the shares and waits for it, or for
// ctx. The shares held stay in force at the Home until their leases end;
// decisions made after Close are made under them, then under the floor.
func (r *Region) Close(ctx context.Context) error {
	r.cancel()
	select {
	case <-r.done:
		r.metrics.stop()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Allow decides req under this region's share of req.Limit, one of the
// global limits.
func (r *Region) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	e, err := r.entryFor(req)
	if err != nil {
		return tollgate.Decision{}, err
	}
	p := acquire(&e.plan)
	defer p.release()
	lim, ok := e.limitAt(p, time.Now(), r.s.skew)
	cost := max(req.Cost, 1)
	e.asked.Add(cost)
	e.requests.Add(1)
	if !ok || cost > lim.Capacity() && !req.Overdraw {
		r.metrics.refused(e.sh)
		return tollgate.Decision{RetryAfter: r.s.rebalance}, nil
	}
	req.Limit = lim
	d, err := r.local.Allow(ctx, req)
	if err == nil && !d.Allowed {
		r.metrics.refused(e.sh)
	}
	return d, err
}

// AllowAll decides reqs all or nothing on the local store, each under this
// region's share of its global limit.
func (r *Region) AllowAll(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	if len(reqs) == 0 || len(reqs) > tollgate.MaxAllowAll {
		return nil, fmt.Errorf("%w: AllowAll takes 1 to %d requests, got %d", tollgate.ErrInvalidRequest, tollgate.MaxAllowAll, len(reqs))
	}
	local := make([]tollgate.Request, len(reqs))
	entries := make([]*entry, len(reqs))
	short := -1
	now := time.Now()
	for i, req := range reqs {
		e, err := r.entryFor(req)
		if err != nil {
			return nil, err
		}
		p := acquire(&e.plan)
		defer p.release()
		lim, ok := e.limitAt(p, now, r.s.skew)
		if cost := max(req.Cost, 1); (!ok || cost > lim.Capacity() && !req.Overdraw) && short < 0 {
			short = i
		}
		entries[i], local[i] = e, req
		local[i].Limit = lim
	}
	for i, e := range entries {
		e.asked.Add(max(reqs[i].Cost, 1))
		e.requests.Add(1)
	}
	if short >= 0 {
		ds := make([]tollgate.Decision, len(reqs))
		ds[short].RetryAfter = r.s.rebalance
		r.metrics.refused(entries[short].sh)
		return ds, nil
	}
	ds, err := r.local.AllowAll(ctx, local)
	if err == nil && len(ds) > 0 && !ds[0].Allowed {
		for i, d := range ds {
			if d.RetryAfter > 0 {
				r.metrics.refused(entries[i].sh)
			}
		}
	}
	return ds, err
}

// Peek reports what Allow would answer for req now, from the local store
// under this region's share.
func (r *Region) Peek(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	e, err := r.lookup(req)
	if err != nil {
		return tollgate.Decision{}, err
	}
	p := acquire(&e.plan)
	defer p.release()
	lim, ok := e.limitAt(p, time.Now(), r.s.skew)
	if !ok {
		return tollgate.Decision{RetryAfter: r.s.rebalance}, nil
	}
	req.Limit = lim
	return r.local.Peek(ctx, req)
}

// Reset forgets this region's local state of req's identity under req's
// limit; the shares at the Home are untouched.
func (r *Region) Reset(ctx context.Context, req tollgate.Request) error {
	e, err := r.lookup(req)
	if err != nil {
		return err
	}
	lim, _ := e.sh.local(e.sh.floor)
	req.Limit = lim
	return r.local.Reset(ctx, req)
}

// DecidesInProcess reports whether the local store decides in process.
func (r *Region) DecidesInProcess() bool {
	ip, ok := r.local.(tollgate.InProcess)
	return ok && ip.DecidesInProcess()
}

// entryFor returns the entry of req's identity and limit, made when new;
// beyond MaxKeys entries, the limit's floor entry, which is never reported.
func (r *Region) entryFor(req tollgate.Request) (*entry, error) {
	e, sh, err := r.find(req)
	if e != nil || err != nil {
		return e, err
	}
	k := entryKey{req.Key, sh}
	if r.count.Add(1) > int64(r.s.maxKeys) {
		r.count.Add(-1)
		return r.floors[sh], nil
	}
	e = &entry{key: req.Key, sh: sh, since: time.Now(), asks: demand{size: r.s.samples}}
	e.plan.Store(newPlan(sh.floor, -1, time.Time{}, time.Time{}))
	v, loaded := r.entries.LoadOrStore(k, e)
	if loaded {
		r.count.Add(-1)
	}
	return v.(*entry), nil
}

// lookup returns the entry of req's identity and limit, or the limit's
// floor entry when there is none: a look makes no entry, so it is never
// reported to the Home.
func (r *Region) lookup(req tollgate.Request) (*entry, error) {
	e, sh, err := r.find(req)
	if e == nil && err == nil {
		e = r.floors[sh]
	}
	return e, err
}

// find validates req and returns its entry (nil when there is none) and
// its global limit's sharing.
func (r *Region) find(req tollgate.Request) (*entry, *shared, error) {
	if err := req.Validate(); err != nil {
		return nil, nil, err
	}
	sh := r.s.limits[normalize(req.Limit)]
	if sh == nil {
		return nil, nil, fmt.Errorf("%w: %s is not one of the global limits this region shares", tollgate.ErrInvalidRequest, req.Limit)
	}
	if v, ok := r.entries.Load(entryKey{req.Key, sh}); ok {
		return v.(*entry), sh, nil
	}
	return nil, sh, nil
}

// limitAt is the local limit p stands for at now: the share while its
// lease lasts (a rate) or in its window away from the window's bounds (a
// window), else the floor. ok is false when it holds no burst.
func (e *entry) limitAt(p *plan, now time.Time, skew time.Duration) (tollgate.Limit, bool) {
	return e.sh.local(e.inForce(p, now, skew))
}

// inForce is the share p gives at now (see limitAt): its share while its
// lease lasts, and for a window in its window away from the window's
// bounds; else the floor.
func (e *entry) inForce(p *plan, now time.Time, skew time.Duration) int64 {
	if !now.Before(p.until) {
		return e.sh.floor
	}
	if !e.sh.window {
		return p.share
	}
	w, start, end := e.sh.windowAt(now)
	if p.window == w && now.Sub(start) >= skew && end.Sub(now) > skew {
		return p.share
	}
	return e.sh.floor
}

// shareInForce is the share key decides under for l now (its floor when
// the region holds no entry of it).
func (r *Region) shareInForce(key string, l tollgate.Limit) int64 {
	sh := r.s.limits[normalize(l)]
	v, ok := r.entries.Load(entryKey{key, sh})
	if !ok {
		return sh.floor
	}
	e := v.(*entry)
	return e.inForce(e.plan.Load(), time.Now(), r.s.skew)
}
