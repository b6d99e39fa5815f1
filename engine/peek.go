package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/keyfunc"
)

// Caller names one identity of a rule, as the rule's key function sees it,
// for Peek and Reset. Set one of its fields.
type Caller struct {
	// Value is the key function's value for the caller. For a rule keyed by
	// keyfunc.Join or keyfunc.FirstOf, keyfunc.JoinValues and
	// keyfunc.FirstOfValue build it from its parts.
	Value string
	// Metadata, when Value is empty, is given to the rule's key function as
	// the headers of a call to Method, so that the identity is found
	// exactly as for a real call carrying them: keys in lower case, "-bin"
	// values decoded, as gRPC metadata holds them (a metadata.MD is one).
	Metadata map[string][]string
	// Method is the method or route the key function is given with
	// Metadata ("/pkg.Service/Method", "GET /items/{id}"); keyfunc.Method
	// reads it.
	Method string
	// Anonymous names the identity every caller without a key shares under
	// ShareMissing.
	Anonymous bool
}

// Quota is the state of one limit of a rule for one identity.
type Quota struct {
	// Limit is the limit (for PerCaller limits, the one its
	// function returns for the identity now).
	Limit tollgate.Limit
	// PerMessage reports that Limit is the rule's PerMessage limit, whose
	// state is separate from the call limits'.
	PerMessage bool
	// Cost is what Decision was asked for: the rule's Cost (at least 1,
	// at most the limit's capacity), or 1 for a message.
	Cost int64
	// Decision is what a call of Cost would get now; nothing is debited.
	// Its Remaining is what would be left after that call.
	Decision tollgate.Decision
	// Available is how many units the identity has now: Decision.Remaining,
	// plus Cost when the call would be admitted.
	Available int64
	// InFlight reports that this Quota is the rule's in-flight limit
	// (Rule.InFlight) instead of a rate: Limit is zero, InUse seats of
	// MaxInFlight (InFlight.Max) are held, Available are free and Decision
	// says whether a call would get one.
	InFlight           bool
	InUse, MaxInFlight int64
	// Blocked reports that the caller is blocked under the rule
	// (Limiter.Block): Limit is zero, Decision.Allowed false, and no
	// other Quota of the rule's call limits is reported.
	Blocked bool
	// Override reports that Limit is an override's (Limiter.SetOverride),
	// with its own state, in force for the caller instead of the rule's.
	Override bool
	// Expires is when the block or override ends; zero for never.
	Expires time.Time
}

// ErrUnknownRule is matched (errors.Is) by the error Peek, Reset and the
// overrides' methods return for a rule name the Limiter does not have.
var ErrUnknownRule = errors.New("engine: unknown rule")

// The errors of the operators' methods (Peek, Reset, SetOverride, Block,
// DeleteOverride, Overrides) say what went wrong by what they match
// (errors.Is), so that a door maps them to its own codes: ErrUnknownRule;
// tollgate.ErrInvalidRequest, an argument that cannot be used;
// errors.ErrUnsupported, a store without what the method needs; anything
// else, a store that failed.
type opError struct {
	msg string
	is  error
}

func (e opError) Error() string        { return e.msg }
func (e opError) Is(target error) bool { return target == e.is }

// unknownRule is the error of an unknown rule name.
// limitingRule returns the named rule in force, or an error when there is
// none or it keeps no quota per caller (a rule with only Overload).
func (l *Limiter) limitingRule(name string) (*rule, error) {
	r := l.book.Load().byName[name]
	if r == nil {
		return nil, unknownRule(name)
	}
	if r.call == nil {
		return nil, invalidArg("rule %q has only Overload: it keeps no quota per caller to read, override, reset or count", name)
	}
	return r, nil
}

func unknownRule(name string) error {
	return opError{fmt.Sprintf("engine: no rate limit rule is named %q", name), ErrUnknownRule}
}

// invalidArg is the error of an argument that cannot be used.
func invalidArg(format string, args ...any) error {
	return opError{fmt.Sprintf(format, args...), tollgate.ErrInvalidRequest}
}

// storeFailed is the error of a store that could not answer for rule.
func storeFailed(rule string, err error) error {
	return fmt.Errorf("rate limit %q: the store cannot answer: %w", rule, err)
}

// Peek returns the state of every limit in force for who under the named
// rule, without debiting anything or recording a request id: an override's
// limits instead of the rule's (Quota.Override), a block as one Quota with
// Blocked set, and the seats it holds under the rule's in-flight limit. An
// unknown rule matches ErrUnknownRule, an identity the key function cannot
// find tollgate.ErrInvalidRequest; anything else is a store failure.
func (l *Limiter) Peek(ctx context.Context, rule string, who Caller) ([]Quota, error) {
	var out []Quota
	err := l.eachLimit(ctx, rule, who, func(p *plan, it limitItem) error {
		req := it.req
		switch {
		case it.blocked:
			out = append(out, Quota{Blocked: true, Cost: max(p.rule.Cost, 1), Expires: it.expires})
			return nil
		case req.Limit == (tollgate.Limit{}):
			inUse, err := l.store.(tollgate.SeatStore).SeatsInUse(ctx, req.Key)
			if err != nil {
				return err
			}
			f := p.inFlight
			free := max(f.max-inUse, 0)
			out = append(out, Quota{
				InFlight: true, InUse: inUse, MaxInFlight: f.max, Cost: 1, Available: free,
				Decision: tollgate.Decision{Allowed: free > 0, Remaining: max(free-1, 0)},
			})
			return nil
		}
		dec, err := l.store.Peek(ctx, req)
		if err != nil {
			return err
		}
		q := Quota{Limit: req.Limit, PerMessage: p.scope == scopeMessage, Cost: req.Cost, Decision: dec, Available: dec.Remaining, Override: it.override, Expires: it.expires}
		if dec.Allowed {
			q.Available += req.Cost
		}
		out = append(out, q)
		return nil
	})
	return out, err
}

// Reset forgets the state of every limit in force for who under the named
// rule (an override's, when one is), in the shared store and in the local
// store of FailLocal: the identity is back to full buckets and empty
// windows. A block stays. Errors are those of Peek.
func (l *Limiter) Reset(ctx context.Context, rule string, who Caller) error {
	return l.eachLimit(ctx, rule, who, func(_ *plan, it limitItem) error {
		req := it.req
		if it.blocked || req.Limit == (tollgate.Limit{}) {
			return nil // seats belong to calls still running
		}
		if l.local != nil {
			if err := l.local.Reset(ctx, req); err != nil {
				return err
			}
		}
		return l.store.Reset(ctx, req)
	})
}

// Rules returns a deep copy of the Limiter's rules as configured, in
// Config.Rules order (or SetRules'): changing it changes nothing in the
// Limiter.
func (l *Limiter) Rules() []Rule {
	rules := l.book.Load().rules
	out := make([]Rule, len(rules))
	for i, r := range rules {
		out[i] = r.clone()
	}
	return out
}

// limitItem is one limit eachLimit visits: its request (no Limit for an
// in-flight limit), or a block.
type limitItem struct {
	req      tollgate.Request
	blocked  bool      // the caller is blocked: req is empty
	override bool      // req's limit is an override's
	expires  time.Time // of the block or override
}

// eachLimit calls f with every limit in force for who under rule, in the
// rule's order (an override's limits, or its block, in place of the call
// limits), the message limit last; for an in-flight limit, a request of the
// identity's key with no Limit.
func (l *Limiter) eachLimit(ctx context.Context, rule string, who Caller, f func(*plan, limitItem) error) error {
	r, err := l.limitingRule(rule)
	if err != nil {
		return err
	}
	value, anonymous, err := r.identify(ctx, who)
	if err != nil {
		return err
	}
	for _, p := range [2]*plan{r.call, r.message} {
		if p == nil {
			continue
		}
		key := p.key(value, anonymous)
		ov, overridden, _, err := l.overrideOf(ctx, p, key)
		if err != nil {
			return storeFailed(r.Name, err)
		}
		var items []limitItem
		limits := p.limits
		switch {
		case overridden && len(ov.limits) == 0:
			items = append(items, limitItem{blocked: true, expires: ov.expires})
			limits = nil
		case overridden:
			limits = p.overrideLimits(ov.limits)
		default:
			var res result
			var ok bool
			if limits, ok = p.limitsFor(ctx, value, &res); !ok {
				return fmt.Errorf("rate limit %q: %w", r.Name, res.err)
			}
		}
		cost := int64(1)
		if p.priced {
			cost = max(r.Cost, 1)
		}
		for _, lp := range limits {
			req := tollgate.Request{Key: lp.key(key), Limit: lp.limit, Cost: min(cost, lp.limit.Capacity())}
			items = append(items, limitItem{req: req, override: overridden, expires: ov.expires})
		}
		if p.inFlight != nil {
			items = append(items, limitItem{req: tollgate.Request{Key: key}}) // the in-flight limit: no Limit
		}
		for _, it := range items {
			if err := f(p, it); err != nil {
				return storeFailed(r.Name, err)
			}
		}
	}
	return nil
}

// identify returns the key function's value for who.
func (r *rule) identify(ctx context.Context, who Caller) (value string, anonymous bool, err error) {
	switch {
	case who.Anonymous:
		if !r.ShareMissing {
			return "", false, invalidArg("rate limit %q has no anonymous identity: it does not set ShareMissing", r.Name)
		}
		return "", true, nil
	case who.Value != "":
		if len(who.Value) > keyfunc.MaxValueLen {
			return "", false, invalidArg("rate limit %q: the value is %d bytes, more than %d", r.Name, len(who.Value), keyfunc.MaxValueLen)
		}
		return who.Value, false, nil
	case who.Metadata != nil:
		md := who.Metadata
		call := keyfunc.Call{Method: who.Method, Header: keyfunc.MetadataHeader(ctx, func(_ context.Context, k string) []string { return md[k] })}
		value, err := r.Key(ctx, call)
		if err != nil {
			return "", false, invalidArg("rate limit %q cannot identify the caller from the metadata given: %v", r.Name, err)
		}
		return value, false, nil
	}
	return "", false, invalidArg("rate limit %q: name the caller by its value, its metadata or as anonymous", r.Name)
}
