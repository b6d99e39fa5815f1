package interceptor

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
)

// DefaultOverrideRefresh is how often a Limiter asks its store whether an
// override changed, unless WithOverrideRefresh says otherwise: an override
// set through one replica applies on every other within about this long.
const DefaultOverrideRefresh = time.Second

// Override replaces a rule's limits for one caller, on every replica that
// shares the store (Limiter.SetOverride).
type Override struct {
	// Rule is the rule's name.
	Rule string
	// Caller is the identity: its Value, or Anonymous.
	Caller Caller
	// Limits replace the rule's limits for the caller; none blocks it: its
	// calls are refused with codes.PermissionDenied.
	Limits []tollgate.Limit
	// Expires is when the override ends; zero for never.
	Expires time.Time
}

// SetOverride makes limits the named rule's limits for who, on every
// replica sharing the store, until ttl from now (0: until deleted). No
// limits blocks the caller. The caller's buckets carry over, as when a
// LimitFunc changes its answer. An unknown rule is codes.NotFound; a
// caller the key function cannot name, a limit that does not validate or
// cannot admit the rule's Cost, or a negative ttl is codes.InvalidArgument,
// and nothing is stored; a store failure is codes.Unavailable.
func (l *Limiter) SetOverride(ctx context.Context, rule string, who Caller, limits []tollgate.Limit, ttl time.Duration) error {
	p, key, err := l.overrideTarget(ctx, rule, who)
	if err != nil {
		return err
	}
	switch {
	case ttl < 0:
		return status.Errorf(codes.InvalidArgument, "override of rule %q: the ttl must be >= 0, got %s", rule, ttl)
	case len(limits) > tollgate.MaxAllowAll:
		return status.Errorf(codes.InvalidArgument, "override of rule %q: %d limits, more than %d", rule, len(limits), tollgate.MaxAllowAll)
	}
	for i, lim := range limits {
		if err := checkLimit(lim, max(p.rule.Cost, 1)); err != nil {
			return status.Errorf(codes.InvalidArgument, "override of rule %q: limit %d: %v", rule, i, err)
		}
	}
	if err := distinctLimits(limits); err != nil {
		return status.Errorf(codes.InvalidArgument, "override of rule %q: %v", rule, err)
	}
	o := tollgate.Override{Key: key, Limits: append([]tollgate.Limit(nil), limits...)}
	if err := l.ov.st.SetOverride(ctx, rule, o, ttl); err != nil {
		return storeError(rule, err)
	}
	l.ov.reload(ctx, l.book.Load().rules)
	return nil
}

// DeleteOverride ends the override of the named rule for who, if any: the
// rule's own limits apply again on every replica within the refresh delay.
// Errors are those of SetOverride.
func (l *Limiter) DeleteOverride(ctx context.Context, rule string, who Caller) error {
	_, key, err := l.overrideTarget(ctx, rule, who)
	if err != nil {
		return err
	}
	if err := l.ov.st.DeleteOverride(ctx, rule, key); err != nil {
		return storeError(rule, err)
	}
	l.ov.reload(ctx, l.book.Load().rules)
	return nil
}

// Overrides returns the overrides of the named rule in force, as the store
// holds them now. An unknown rule is codes.NotFound; a store failure
// codes.Unavailable.
func (l *Limiter) Overrides(ctx context.Context, rule string) ([]Override, error) {
	r := l.book.Load().byName[rule]
	if r == nil {
		return nil, unknownRuleError(rule)
	}
	if l.ov.st == nil {
		return nil, nil
	}
	os, err := l.ov.st.Overrides(ctx, rule)
	if err != nil {
		return nil, storeError(rule, err)
	}
	out := make([]Override, 0, len(os))
	for _, o := range os {
		who, ok := r.call.caller(o.Key)
		if !ok {
			continue // another rule's, by a name this one does not make
		}
		out = append(out, Override{Rule: rule, Caller: who, Limits: o.Limits, Expires: o.Expires})
	}
	return out, nil
}

// overrideTarget returns the call plan of rule and the store key of who.
func (l *Limiter) overrideTarget(ctx context.Context, rule string, who Caller) (*plan, string, error) {
	r := l.book.Load().byName[rule]
	if r == nil {
		return nil, "", unknownRuleError(rule)
	}
	if l.ov.st == nil {
		return nil, "", status.Errorf(codes.FailedPrecondition, "override of rule %q: the store does not keep overrides (tollgate.OverrideStore)", rule)
	}
	value, anonymous, err := r.identify(ctx, who)
	if err != nil {
		return nil, "", err
	}
	return r.call, r.call.key(value, anonymous), nil
}

// overrideOf returns the override of the caller whose store key is key
// under p, if one is in force: calls only.
func (l *Limiter) overrideOf(ctx context.Context, p *plan, key string) (cachedOverride, bool) {
	if p.scope != scopeCall {
		return cachedOverride{}, false
	}
	return l.ov.lookup(ctx, l.book.Load().rules, p.rule.Name, key)
}

// caller is the Caller of the store key k of p, and whether p makes k.
func (p *plan) caller(k string) (Caller, bool) {
	if k == p.anon {
		return Caller{Anonymous: true}, true
	}
	v, ok := strings.CutPrefix(k, p.prefix)
	return Caller{Value: v}, ok
}

// storeError is the status of a store failure while changing overrides.
func storeError(rule string, err error) error {
	if errors.Is(err, tollgate.ErrInvalidRequest) {
		return status.Errorf(codes.InvalidArgument, "override of rule %q: %v", rule, err)
	}
	return status.Errorf(codes.Unavailable, "override of rule %q: the store cannot answer: %v", rule, err)
}

// overrides is a Limiter's view of the overrides in its store: read whole
// when the store's version changes, which the Limiter asks at most every
// refresh, during some call (so that no goroutine runs for it).
type overrides struct {
	st      tollgate.OverrideStore // nil when the store keeps none
	refresh time.Duration
	timeout time.Duration // of each read

	// checked is when the version was last asked (UnixNano); refreshing
	// is held by the one call asking.
	checked    atomic.Int64
	refreshing atomic.Bool
	// none: the store holds no override at all, so lookups are skipped;
	// loaded: they were read once.
	none, loaded atomic.Bool

	mu      sync.RWMutex
	version int64
	byRule  map[string]map[string]cachedOverride
}

// cachedOverride is one override as a lookup uses it.
type cachedOverride struct {
	limits  []tollgate.Limit
	expires time.Time
}

// reset makes the next lookup read every override again: the rules
// changed.
func (o *overrides) reset() {
	o.mu.Lock()
	o.byRule = nil
	o.mu.Unlock()
	o.invalidate()
}

// invalidate makes the next lookup ask the store.
func (o *overrides) invalidate() { o.checked.Store(0) }

// reload reads the overrides now: this replica changed one and applies it
// at once.
func (o *overrides) reload(ctx context.Context, rules []*rule) {
	for !o.refreshing.CompareAndSwap(false, true) {
		time.Sleep(time.Millisecond) // a background read is under way
	}
	o.load(ctx, time.Now(), rules)
	o.refreshing.Store(false)
}

// lookup returns the override of key under rule, if one is in force;
// rules are the rules in force, whose overrides a refresh reads.
func (o *overrides) lookup(ctx context.Context, rules []*rule, rule, key string) (cachedOverride, bool) {
	if o.st == nil {
		return cachedOverride{}, false
	}
	now := time.Now()
	if now.UnixNano()-o.checked.Load() >= int64(o.refresh) && o.refreshing.CompareAndSwap(false, true) {
		if o.loaded.Load() {
			// Asked in the background: no call waits on the store for it.
			go func() {
				o.load(context.Background(), now, rules)
				o.refreshing.Store(false)
			}()
		} else {
			// Nothing read yet: this call waits, so that a replica does not
			// start by admitting a blocked caller.
			o.load(ctx, now, rules)
			o.refreshing.Store(false)
		}
	}
	if o.none.Load() {
		return cachedOverride{}, false
	}
	o.mu.RLock()
	c, ok := o.byRule[rule][key]
	o.mu.RUnlock()
	if !ok || !c.expires.IsZero() && !now.Before(c.expires) {
		return cachedOverride{}, false
	}
	return c, true
}

// load reads the overrides again when the store's version changed. A
// store that cannot answer leaves the last ones in force until the next
// try.
func (o *overrides) load(ctx context.Context, now time.Time, rules []*rule) {
	o.checked.Store(now.UnixNano())
	// Its own deadline, and not the breaker's business: a background read
	// must not open the breaker for the calls' decisions.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.timeout)
	defer cancel()
	v, err := o.st.OverridesVersion(ctx)
	if err != nil {
		return
	}
	o.mu.RLock()
	same := v == o.version && o.byRule != nil
	o.mu.RUnlock()
	if same {
		return
	}
	byRule := make(map[string]map[string]cachedOverride)
	n := 0
	for _, r := range rules {
		os, err := o.st.Overrides(ctx, r.Name)
		if err != nil {
			return
		}
		for _, ov := range os {
			if byRule[r.Name] == nil {
				byRule[r.Name] = make(map[string]cachedOverride)
			}
			byRule[r.Name][ov.Key] = cachedOverride{limits: ov.Limits, expires: ov.Expires}
			n++
		}
	}
	o.mu.Lock()
	o.version, o.byRule = v, byRule
	o.mu.Unlock()
	o.none.Store(n == 0)
	o.loaded.Store(true)
}
