package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate/tollgate"
)

// CallerOverride replaces a rule's limits for one caller, or blocks it, on
// every replica that shares the store (Limiter.SetOverride, Limiter.Block).
// tollgate.Override is the store's record of it.
type CallerOverride struct {
	// Rule is the rule's name.
	Rule string
	// Caller is the identity: its Value, or Anonymous.
	Caller Caller
	// Limits replace the rule's limits for the caller; none when Blocked.
	Limits []tollgate.Limit
	// Blocked reports a block (Limiter.Block): the caller's calls are
	// refused as Blocked.
	Blocked bool
	// Expires is when the override ends; zero for never.
	Expires time.Time
}

// SetOverride makes limits the named rule's limits for who, on every
// replica sharing the store, until ttl from now (0: until deleted): this
// replica's next call and, through the store's watch, every other's within
// a round trip, and at the latest within the refresh delay. The caller's
// buckets carry over, as when PerCaller limits change. An unknown
// rule matches ErrUnknownRule; no limits (Block blocks), a caller the key
// function cannot name, a limit that does not validate or cannot admit the
// rule's Cost, or a negative ttl matches tollgate.ErrInvalidRequest, and
// nothing is stored; a store that keeps no overrides matches
// errors.ErrUnsupported; anything else is a store failure.
func (l *Limiter) SetOverride(ctx context.Context, rule string, who Caller, limits []tollgate.Limit, ttl time.Duration) error {
	return l.setOverride(ctx, rule, who, limits, false, ttl)
}

// Block refuses the named rule's calls from who (Blocked), on every replica sharing the store, until ttl
// from now (0: until DeleteOverride), as soon as SetOverride applies. It
// replaces any override of who. Errors are those of SetOverride.
func (l *Limiter) Block(ctx context.Context, rule string, who Caller, ttl time.Duration) error {
	return l.setOverride(ctx, rule, who, nil, true, ttl)
}

// setOverride stores limits, or a block, as the override of who.
func (l *Limiter) setOverride(ctx context.Context, rule string, who Caller, limits []tollgate.Limit, block bool, ttl time.Duration) error {
	p, key, err := l.overrideTarget(ctx, rule, who)
	if err != nil {
		return err
	}
	switch {
	case !block && len(limits) == 0:
		return invalidArg("override of rule %q: no limits: give at least one, or use Block to refuse the caller's calls", rule)
	case ttl < 0:
		return invalidArg("override of rule %q: the ttl must be >= 0, got %s", rule, ttl)
	case len(limits) > tollgate.MaxAllowAll:
		return invalidArg("override of rule %q: %d limits, more than %d", rule, len(limits), tollgate.MaxAllowAll)
	}
	for i, lim := range limits {
		if err := checkLimit(lim, max(p.rule.Cost, 1)); err != nil {
			return invalidArg("override of rule %q: limits[%d]: %v", rule, i, err)
		}
	}
	if err := distinctLimits(limits); err != nil {
		return invalidArg("override of rule %q: %v", rule, err)
	}
	o := tollgate.Override{Key: key, Limits: append([]tollgate.Limit(nil), limits...)}
	if err := l.ov.st.SetOverride(ctx, rule, o, ttl); err != nil {
		return storeError(rule, err)
	}
	l.ov.changedHere(ctx)
	return nil
}

// DeleteOverride ends the override or the block of the named rule for who,
// if any: the rule's own limits apply again on every replica, as soon as
// SetOverride applies.
// Errors are those of SetOverride.
func (l *Limiter) DeleteOverride(ctx context.Context, rule string, who Caller) error {
	_, key, err := l.overrideTarget(ctx, rule, who)
	if err != nil {
		return err
	}
	if err := l.ov.st.DeleteOverride(ctx, rule, key); err != nil {
		return storeError(rule, err)
	}
	l.ov.changedHere(ctx)
	return nil
}

// Overrides returns the overrides of the named rule in force, as the store
// holds them now. Errors are those of SetOverride.
func (l *Limiter) Overrides(ctx context.Context, rule string) ([]CallerOverride, error) {
	r, err := l.limitingRule(rule)
	if err != nil {
		return nil, err
	}
	if l.ov.st == nil {
		return nil, nil
	}
	os, err := l.ov.st.Overrides(ctx, rule)
	if err != nil {
		return nil, storeError(rule, err)
	}
	out := make([]CallerOverride, 0, len(os))
	for _, o := range os {
		who, ok := r.call.caller(o.Key)
		if !ok {
			continue // another rule's, by a name this one does not make
		}
		out = append(out, CallerOverride{Rule: rule, Caller: who, Limits: o.Limits, Blocked: len(o.Limits) == 0, Expires: o.Expires})
	}
	return out, nil
}

// overrideTarget returns the call plan of rule and the store key of who.
func (l *Limiter) overrideTarget(ctx context.Context, rule string, who Caller) (*plan, string, error) {
	r, err := l.limitingRule(rule)
	if err != nil {
		return nil, "", err
	}
	if l.ov.st == nil {
		return nil, "", opError{fmt.Sprintf("override of rule %q: the store does not keep overrides (tollgate.OverrideStore)", rule), errors.ErrUnsupported}
	}
	value, anonymous, err := r.identify(ctx, who)
	if err != nil {
		return nil, "", err
	}
	return r.call, r.call.key(value, anonymous), nil
}

// overrideOf returns the override of the caller whose store key is key
// under p, if one is in force: calls only. err reports that the overrides
// could not be confirmed within the store deadline; the override returned
// is then the last one seen. A check of the overrides that failed is the
// call's store call (stat), for the store latency metric.
func (l *Limiter) overrideOf(ctx context.Context, p *plan, key string) (o cachedOverride, found bool, stat storeCall, err error) {
	if p.scope != scopeCall {
		return cachedOverride{}, false, stat, nil
	}
	o, found, check, err := l.ov.lookup(ctx, p.rule.Name, key)
	if check.measured && check.failed {
		stat = storeCall{measured: true, failed: true, elapsed: check.elapsed}
	}
	return o, found, stat, err
}

// caller is the Caller of the store key k of p, and whether p makes k.
func (p *plan) caller(k string) (Caller, bool) {
	if k == p.anon {
		return Caller{Anonymous: true}, true
	}
	v, ok := strings.CutPrefix(k, p.prefix)
	return Caller{Value: v}, ok
}

// storeError is the error of a store failure while changing overrides.
func storeError(rule string, err error) error {
	return fmt.Errorf("override of rule %q: the store cannot answer: %w", rule, err)
}
