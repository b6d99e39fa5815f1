package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/flight"
	"github.com/tollgate/tollgate/internal/storecall"
)

// errOverridesStale is the cause of a decision made by the fail policy
// because the overrides could not be confirmed within the store deadline.
var errOverridesStale = errors.New("the overrides could not be read within the store deadline")

// overrides is a Limiter's view of the overrides in its store, with one
// promise: no call is decided on overrides older than the refresh delay.
// A check asks the store's version, and reads every override again when it
// changed; the view is fresh for refresh after a check began, unless the
// store's watch says the overrides changed since. A call that finds the
// view stale waits for a check (one at a time, shared by the calls that
// wait) within the store deadline. The watch (tollgate.OverrideWatcher)
// makes a change through another replica apply here within a round trip of
// its announcement; the refresh covers the announcements it misses.
type overrides struct {
	st      tollgate.OverrideStore // nil when the store keeps none
	refresh time.Duration
	timeout time.Duration // of each check
	rules   func() []*rule
	clk     clock
	epoch   time.Time // checks are timed from it (monotonic)
	// calls is the Limiter's store-call policy: a check on a call's path is
	// a store call like a decision, behind the same breaker.
	calls *storecall.Policy

	// changes counts the changes announced (by the watch, by this
	// replica, by SetRules); checked is the last successful check. Changes
	// are counted rather than timed, so that a clock reading the same time
	// twice (a coarse one, a test's) cannot order a check before a change.
	changes atomic.Int64
	checked atomic.Pointer[checkMark]
	// none: the store holds no override at all, so lookups are skipped.
	none atomic.Bool
	// announced: the store decides in process and announces every change
	// (store.Memory), so the view is fresh until the next announcement, at
	// any age, and a call reads no clock for it.
	announced bool

	mu       sync.Mutex
	inFlight *overrideCheck // the check under way, if any

	viewMu  sync.RWMutex
	version int64
	byRule  map[string]map[string]cachedOverride // nil: read them all again

	stopOnce  sync.Once
	stopWatch func() // the store's watch; nil without one
}

// checkMark is when a check began (ns since epoch) and how many changes
// had been announced by then.
type checkMark struct{ at, changes int64 }

// cachedOverride is one override as a lookup uses it.
type cachedOverride struct {
	limits  []tollgate.Limit
	expires time.Time
}

// overrideCheck is one check, shared by the calls waiting for it.
type overrideCheck struct {
	f   *flight.Flight
	err error // set before f lands
}

// checkStat is the check a call made, for its store-call metric: a check
// that failed is recorded as the call's store call, since the call is then
// decided by its fail policy without another.
type checkStat struct {
	measured, failed bool
	elapsed          time.Duration
}

// init sets o up for st (its overrides, when it keeps them) and starts the
// store's watch, when it has one.
func (o *overrides) init(st tollgate.Store, clk clock, calls *storecall.Policy, refresh, timeout time.Duration, rules func() []*rule) {
	o.st, _ = st.(tollgate.OverrideStore)
	o.clk, o.calls, o.refresh, o.timeout, o.rules = clk, calls, refresh, timeout, rules
	o.epoch = clk.now()
	if w, ok := st.(tollgate.OverrideWatcher); ok {
		// announced is set before the watch starts: its goroutine reads it.
		ip, ok := st.(tollgate.InProcess)
		o.announced = ok && ip.DecidesInProcess()
		o.stopWatch = w.WatchOverrides(o.changed)
	}
}

// stop ends the store's watch; the calls after it still see the overrides,
// within the refresh delay.
func (o *overrides) stop() {
	o.stopOnce.Do(func() {
		if o.stopWatch != nil {
			o.stopWatch()
		}
	})
}

// now is the time since o.epoch.
func (o *overrides) now() int64 { return int64(o.clk.since(o.epoch)) }

// changed is the watch's news that the overrides may have changed: the
// view is stale until a check that begins now, which the watch's goroutine
// makes, so that no call waits for it.
func (o *overrides) changed() {
	o.changes.Add(1)
	_, _ = o.fresh(context.Background())
}

// reset makes the next call read every override again: the rules changed.
func (o *overrides) reset() {
	o.viewMu.Lock()
	o.byRule = nil
	o.viewMu.Unlock()
	o.changes.Add(1)
}

// isFresh reports whether a check began after the last announced change,
// and within the refresh delay unless the store announces every change.
func (o *overrides) isFresh() bool {
	c := o.checked.Load()
	return c != nil && c.changes == o.changes.Load() && (o.announced || o.now()-c.at < int64(o.refresh))
}

// fresh returns once the view is fresh, or the error that kept it from
// being so within the store deadline (at once when the breaker is open).
// stat is set when this caller made the check.
func (o *overrides) fresh(caller context.Context) (stat checkStat, err error) {
	if o.st == nil || o.isFresh() {
		return stat, nil
	}
	ctx, cancel := context.WithTimeout(caller, o.timeout)
	defer cancel()
	for {
		o.mu.Lock()
		c, lead := o.inFlight, false
		if c == nil {
			c, lead = &overrideCheck{f: flight.Start()}, true
			o.inFlight = c
		}
		o.mu.Unlock()
		if lead {
			if call, ok := o.calls.Open(caller); !ok {
				c.err = storecall.ErrBreakerOpen
			} else {
				c.err = o.check(ctx)
				r, elapsed := call.End(c.err)
				stat = checkStat{measured: r.Measured(), failed: r == storecall.Failed, elapsed: elapsed}
			}
			o.mu.Lock()
			o.inFlight = nil
			o.mu.Unlock()
			c.f.Land()
		} else {
			select {
			case <-c.f.Landed():
			case <-ctx.Done():
				return stat, errOverridesStale
			}
		}
		switch {
		case o.isFresh():
			return stat, nil
		case c.err != nil:
			return stat, c.err
		case ctx.Err() != nil:
			return stat, errOverridesStale
		}
		// The check began before a change was announced: another one.
	}
}

// check asks the store's version and reads every override again when it
// changed; the view is then fresh as of when it began. It runs to its own
// deadline whatever the caller that leads it does, since others wait for
// it.
func (o *overrides) check(ctx context.Context) error {
	began := &checkMark{at: o.now(), changes: o.changes.Load()}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.timeout)
	defer cancel()
	v, err := o.st.OverridesVersion(ctx)
	if err != nil {
		return errors.Join(errOverridesStale, err)
	}
	o.viewMu.RLock()
	same := v == o.version && o.byRule != nil
	o.viewMu.RUnlock()
	if !same {
		byRule, n, err := o.read(ctx)
		if err != nil {
			return errors.Join(errOverridesStale, err)
		}
		o.viewMu.Lock()
		o.version, o.byRule = v, byRule
		o.viewMu.Unlock()
		o.none.Store(n == 0)
	}
	o.checked.Store(began)
	return nil
}

// read reads the overrides of every rule in force, and counts them.
func (o *overrides) read(ctx context.Context) (map[string]map[string]cachedOverride, int, error) {
	byRule := make(map[string]map[string]cachedOverride)
	n := 0
	for _, r := range o.rules() {
		if r.call == nil {
			continue // only Overload: no caller to override
		}
		os, err := o.st.Overrides(ctx, r.Name)
		if err != nil {
			return nil, 0, err
		}
		for _, ov := range os {
			if byRule[r.Name] == nil {
				byRule[r.Name] = make(map[string]cachedOverride)
			}
			byRule[r.Name][ov.Key] = cachedOverride{limits: ov.Limits, expires: ov.Expires}
			n++
		}
	}
	return byRule, n, nil
}

// lookup returns the override of key under rule, if one is in force, once
// the view is fresh. When it cannot be made fresh, it returns the error and
// what the stale view holds. stat is the check this caller made, if any.
func (o *overrides) lookup(ctx context.Context, rule, key string) (_ cachedOverride, _ bool, stat checkStat, err error) {
	if o.st == nil {
		return cachedOverride{}, false, stat, nil
	}
	stat, err = o.fresh(ctx)
	if o.none.Load() {
		return cachedOverride{}, false, stat, err
	}
	o.viewMu.RLock()
	c, ok := o.byRule[rule][key]
	o.viewMu.RUnlock()
	if !ok || !c.expires.IsZero() && !o.clk.now().Before(c.expires) {
		return cachedOverride{}, false, stat, err
	}
	return c, true, stat, err
}

// changedHere makes a change this replica made apply to its next call: the
// view is stale until a check that begins after the change.
func (o *overrides) changedHere(ctx context.Context) {
	o.changes.Add(1)
	_, _ = o.fresh(ctx)
}
