package rls

import (
	"context"
	"fmt"
	"math"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/partkey"
	"github.com/tollgate/tollgate/internal/storecall"
)

// kind is what the server does with one request descriptor.
type kind uint8

const (
	kindNone      kind = iota // no limit applies: OK
	kindUnlimited             // unlimited: OK, remaining MaxUint32
	kindEnforced              // decided in the request's one AllowAll
	kindShadow                // decided alone; never refuses the request
	kindPeek                  // hits_addend 0: looked at, not debited
	kindDenied                // can never be admitted (limit 0, or cost above capacity)
	kindOverdraw              // count_over_limit: debited alone, over the limit or not
	kindRefund                // is_negative_hits: the hits given back
)

// check is one request descriptor's part in the decision: its plan and
// what became of it.
type check struct {
	kind kind
	rule *rule
	// reqs are the store requests of the rule's limits, decs the store's
	// answers, one each.
	reqs   []tollgate.Request
	decs   []tollgate.Decision
	metric string // the rule's name in metrics
	// soft: the descriptor never refuses the request (shadow_mode,
	// quota_mode, or the server's quota mode); quota: it is in quota mode.
	soft, quota bool
	// decided: decs hold the store's answers.
	decided bool
	outcome outcome
}

// plan matches every descriptor and decides what to do with it.
func (s *Server) plan(d *domain, req *pb.RateLimitRequest) ([]check, error) {
	descs := req.GetDescriptors()
	checks := make([]check, len(descs))
	var path []*descriptor
	var replaced map[string]bool // names replaced by a matched limit; rare
	for i, desc := range descs {
		var r *rule
		if ov := desc.GetLimit(); ov != nil {
			var err error
			if r, err = overrideRule(d.name, ov); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: limit override: %v", i, err)
			}
			path = path[:0]
		} else if r, path = d.match(desc.GetEntries(), path); r == nil {
			continue
		}
		for _, name := range r.replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
		c := &checks[i]
		c.rule = r
		c.quota = r.quota || s.opts.quota
		c.soft = r.shadow || c.quota
		if r.unlimited {
			c.kind = kindUnlimited
			continue
		}
		key := storeKey(d.name, desc.GetEntries(), path)
		if len(key)+maxPartLen > tollgate.MaxKeyLen {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: its keys and values are more than %d bytes", i, tollgate.MaxKeyLen-maxPartLen)
		}
		c.metric = metricPath(d.name, r, desc.GetEntries())
		hits := uint64(max(1, req.GetHitsAddend()))
		if h := desc.GetHitsAddend(); h != nil {
			hits = h.GetValue()
		}
		cost := int64(min(hits, tollgate.MaxRate))
		switch {
		case hits == 0:
			c.kind = kindPeek
		case desc.GetIsNegativeHits():
			c.kind = kindRefund
		case r.deny:
			c.kind = kindDenied
		case r.countOver || s.opts.countOver:
			c.kind = kindOverdraw
		case cost > r.capacity():
			c.kind = kindDenied
		case c.soft:
			c.kind = kindShadow
		default:
			c.kind = kindEnforced
		}
		c.reqs = make([]tollgate.Request, len(r.limits))
		for j, l := range r.limits {
			k := key
			if l.part != "" {
				k = partkey.Join(key, l.part)
			}
			c.reqs[j] = tollgate.Request{Key: k, Limit: l.limit, Cost: cost, Overdraw: c.kind == kindOverdraw}
		}
	}
	enforced, alone := 0, 0
	for i := range checks {
		c := &checks[i]
		// As in envoyproxy/ratelimit, an unlimited descriptor is never
		// replaced.
		if c.kind != kindUnlimited && c.rule != nil && c.rule.name != "" && replaced[c.rule.name] {
			*c = check{}
			continue
		}
		switch c.kind {
		case kindEnforced:
			enforced += len(c.reqs)
		case kindShadow, kindPeek, kindOverdraw, kindRefund:
			alone++
		}
	}
	if enforced > tollgate.MaxAllowAll {
		return nil, status.Errorf(codes.InvalidArgument, "%d limits on the request's descriptors, more than the %d decided at once", enforced, tollgate.MaxAllowAll)
	}
	if alone > tollgate.MaxAllowAll {
		return nil, status.Errorf(codes.InvalidArgument, "%d shadow-mode, check-only, counted or refunded descriptors, more than %d", alone, tollgate.MaxAllowAll)
	}
	return checks, nil
}

// maxPartLen bounds what partkey.Join adds to a descriptor's key for one
// of several limits: a separator and a period's name.
const maxPartLen = 64

// capacity is the least capacity of r's limits: a cost above it can never
// be admitted.
func (r *rule) capacity() int64 {
	c := int64(math.MaxInt64)
	for _, l := range r.limits {
		c = min(c, l.limit.Capacity())
	}
	return c
}

// overrideRule is the rule for a descriptor carrying its own limit (Envoy's
// limit override): a fixed window, never in shadow mode, as in
// envoyproxy/ratelimit.
func overrideRule(domain string, ov *rlv3.RateLimitDescriptor_RateLimitOverride) (*rule, error) {
	u, ok := overrideUnit(ov.GetUnit())
	if !ok {
		return nil, fmt.Errorf("unknown unit %s", ov.GetUnit())
	}
	period := u.period
	if m := ov.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
		period *= time.Duration(m.GetValue())
	}
	l := ruleLimit{
		current: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: ov.GetRequestsPerUnit(), Unit: u.response, UnitMultiplier: ov.GetUnitMultiplier()},
		limit:   tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: int64(ov.GetRequestsPerUnit()), Period: period},
	}
	r := &rule{path: domain + ".override", limits: []ruleLimit{l}}
	if l.limit.Rate == 0 {
		r.deny = true
		return r, nil
	}
	if err := l.limit.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// decide asks the store and fills the checks' decisions. It returns the
// request's outcome, or the error to answer with.
func (s *Server) decide(ctx context.Context, domain string, checks []check) (outcome, error) {
	overall, err := s.enforce(ctx, domain, checks)
	if err != nil {
		return overall, err
	}
	for i := range checks {
		o, err := s.decideAlone(ctx, domain, &checks[i])
		if err != nil {
			return o, err
		}
		if o == storecall.OutcomeDenied && overall == storecall.OutcomeAllowed {
			overall = o
		}
	}
	if s.opts.shadow && overall == storecall.OutcomeDenied {
		overall = storecall.OutcomeShadowDenied
		for i := range checks {
			if checks[i].outcome == storecall.OutcomeDenied {
				checks[i].outcome = storecall.OutcomeShadowDenied
			}
		}
	}
	return overall, nil
}

// enforce decides the enforced checks, all or nothing, with one
// Store.AllowAll. It returns their outcome, or the error to answer with.
func (s *Server) enforce(ctx context.Context, domain string, checks []check) (outcome, error) {
	var reqs []tollgate.Request
	var idx []int
	doomed := false
	for i := range checks {
		switch checks[i].kind {
		case kindEnforced:
			reqs = append(reqs, checks[i].reqs...)
			idx = append(idx, i)
		case kindDenied:
			doomed = doomed || !checks[i].soft
		}
	}
	switch {
	case doomed:
		// One descriptor can never be admitted: nothing is debited, and
		// the store need not be asked.
		for _, i := range idx {
			checks[i].outcome = storecall.OutcomeDenied
		}
		return storecall.OutcomeDenied, nil
	case len(reqs) == 0:
		return storecall.OutcomeAllowed, nil
	}
	var decs []tollgate.Decision
	r, err := s.callStore(ctx, domain, func(ctx context.Context) (err error) {
		decs, err = s.store.AllowAll(ctx, reqs)
		if err == nil && len(decs) != len(reqs) {
			err = fmt.Errorf("rls: the store answered %d decisions for %d requests", len(decs), len(reqs))
		}
		return err
	})
	if r != storecall.Decided {
		o, err := s.failed(ctx, r, err)
		for _, i := range idx {
			checks[i].outcome = o
		}
		return o, err
	}
	overall := storecall.OutcomeAllowed
	for _, i := range idx {
		c := &checks[i]
		c.decs, decs = decs[:len(c.reqs):len(c.reqs)], decs[len(c.reqs):]
		c.decided, c.outcome = true, storecall.OutcomeAllowed
		if !c.decs[0].Allowed {
			c.outcome, overall = storecall.OutcomeDenied, storecall.OutcomeDenied
		}
	}
	return overall, nil
}

// decideAlone decides a check that is not part of the request's set: one
// that can never be admitted, a shadow one, a look, hits counted over the
// limit or given back. It returns the outcome it adds to the request's (a
// counted descriptor over its limit denies it), and an error when the
// caller went away or, for counted and refunded hits, when the fail mode
// says so.
func (s *Server) decideAlone(ctx context.Context, domain string, c *check) (outcome, error) {
	var r storecall.Result
	var err error
	switch c.kind {
	case kindDenied:
		c.outcome = storecall.OutcomeDenied
		if c.soft {
			c.outcome = storecall.OutcomeShadowDenied
		}
		return storecall.OutcomeAllowed, nil
	case kindShadow, kindOverdraw:
		// A shadow descriptor never refuses: one the store cannot decide
		// is let through. A counted one is debited whatever it finds.
		r, err = s.callStore(ctx, domain, func(ctx context.Context) (err error) {
			c.decs, err = s.store.AllowAll(ctx, c.reqs)
			return err
		})
		if r == storecall.Decided {
			c.decided, c.outcome = true, storecall.OutcomeAllowed
			if !c.decs[0].Allowed {
				c.outcome = storecall.OutcomeShadowDenied
				if c.kind == kindOverdraw && !c.soft {
					c.outcome = storecall.OutcomeDenied
				}
			}
			return c.outcome, nil
		}
		if c.kind == kindShadow {
			c.outcome = storecall.OutcomeFailOpen
			break
		}
		o, err := s.failed(ctx, r, err)
		c.outcome = o
		return o, err
	case kindRefund:
		r, err = s.callStore(ctx, domain, func(ctx context.Context) (err error) {
			settler, ok := s.store.(tollgate.Settler)
			if !ok {
				return fmt.Errorf("%w: hits given back (is_negative_hits) need a store that settles (tollgate.Settler), which %T is not", tollgate.ErrInvalidRequest, s.store)
			}
			// Nobody kept the admission: the zero Admissions say so.
			c.decs, err = settler.SettleAll(ctx, c.reqs, make([]tollgate.Admission, len(c.reqs)), make([]int64, len(c.reqs)))
			return err
		})
		if r == storecall.Decided {
			c.decided, c.outcome = true, storecall.OutcomeRefunded
			return storecall.OutcomeAllowed, nil
		}
		o, err := s.failed(ctx, r, err)
		c.outcome = o
		return o, err
	case kindPeek:
		if c.rule.deny {
			return storecall.OutcomeAllowed, nil // nothing is ever admitted: OK, nothing remaining
		}
		c.decs = make([]tollgate.Decision, len(c.reqs))
		for j := range c.reqs {
			if r, _ = s.callStore(ctx, domain, func(ctx context.Context) (err error) {
				c.reqs[j].Cost = 0
				c.decs[j], err = s.store.Peek(ctx, c.reqs[j])
				return err
			}); r != storecall.Decided {
				break
			}
		}
		c.decided, c.outcome = r == storecall.Decided, storecall.OutcomePeeked
		if c.decided && (c.rule.countOver || s.opts.countOver) && c.debt() && !c.soft {
			// A look at hits counted over the limit, as envoyproxy/ratelimit
			// answers it: over once the count passed the limit (Envoy's
			// check on the request path, before apply_on_stream_done counts).
			c.outcome = storecall.OutcomeDenied
			return c.outcome, nil
		}
	}
	if r == storecall.Canceled {
		return storecall.OutcomeCanceled, status.FromContextError(ctx.Err()).Err()
	}
	return storecall.OutcomeAllowed, nil
}

// debt reports whether one of the check's limits is owed units past empty:
// hits were counted over it.
func (c *check) debt() bool {
	for _, d := range c.decs {
		if d.Debt > 0 {
			return true
		}
	}
	return false
}

// callStore makes call one store call under the server's policy (deadline,
// breaker) and records its latency.
func (s *Server) callStore(ctx context.Context, domain string, call func(context.Context) error) (storecall.Result, error) {
	r, elapsed, err := s.calls.Do(ctx, call)
	s.tel.recordStore(ctx, domain, r, elapsed)
	return r, err
}

// failed is the outcome of enforced descriptors the store did not decide
// (r) and, unless FailOpen lets the request through, the error to answer
// with.
func (s *Server) failed(ctx context.Context, r storecall.Result, err error) (outcome, error) {
	switch {
	case r == storecall.Canceled:
		return storecall.OutcomeCanceled, status.FromContextError(ctx.Err()).Err()
	case r == storecall.Invalid:
		return storecall.OutcomeInvalid, status.Errorf(codes.Internal, "rate limit: the store refused a request the configuration allowed: %v", err)
	case s.opts.storeFail == AnswerOK:
		return storecall.OutcomeFailOpen, nil
	}
	return storecall.OutcomeFailClosed, status.Error(codes.Unavailable, "rate limit service unavailable: its store cannot decide")
}
