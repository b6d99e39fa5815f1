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
)

// check is one request descriptor's part in the decision: its plan and
// what became of it.
type check struct {
	kind   kind
	rule   *rule
	req    tollgate.Request
	metric string // the rule's name in metrics
	dec    tollgate.Decision
	// decided: dec holds the store's answer.
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
		if r.unlimited {
			c.kind = kindUnlimited
			continue
		}
		c.req.Key = storeKey(d.name, desc.GetEntries(), path)
		if len(c.req.Key) > tollgate.MaxKeyLen {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: its keys and values are more than %d bytes", i, tollgate.MaxKeyLen)
		}
		c.req.Limit = r.limit
		c.metric = metricPath(d.name, r, desc.GetEntries())
		cost := uint64(max(1, req.GetHitsAddend()))
		if h := desc.GetHitsAddend(); h != nil {
			cost = h.GetValue()
		}
		switch {
		case cost == 0:
			c.kind = kindPeek
		case r.deny || cost > uint64(r.limit.Capacity()):
			c.kind = kindDenied
		case r.shadow:
			c.kind = kindShadow
		default:
			c.kind = kindEnforced
		}
		c.req.Cost = int64(min(cost, math.MaxInt64))
	}
	enforced, shadow := 0, 0
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
			enforced++
		case kindShadow, kindPeek:
			shadow++
		}
	}
	if enforced > tollgate.MaxAllowAll {
		return nil, status.Errorf(codes.InvalidArgument, "%d limited descriptors, more than the %d decided at once", enforced, tollgate.MaxAllowAll)
	}
	if shadow > tollgate.MaxAllowAll {
		return nil, status.Errorf(codes.InvalidArgument, "%d shadow-mode or check-only descriptors, more than %d", shadow, tollgate.MaxAllowAll)
	}
	return checks, nil
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
	r := &rule{
		path:    domain + ".override",
		current: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: ov.GetRequestsPerUnit(), Unit: u.response, UnitMultiplier: ov.GetUnitMultiplier()},
		limit:   tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: int64(ov.GetRequestsPerUnit()), Period: period},
	}
	if r.limit.Rate == 0 {
		r.deny = true
		return r, nil
	}
	if err := r.limit.Validate(); err != nil {
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
		if err := s.decideAlone(ctx, domain, &checks[i]); err != nil {
			return storecall.OutcomeCanceled, err
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
			reqs = append(reqs, checks[i].req)
			idx = append(idx, i)
		case kindDenied:
			doomed = doomed || !checks[i].rule.shadow
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
	for j, i := range idx {
		checks[i].dec, checks[i].decided, checks[i].outcome = decs[j], true, storecall.OutcomeAllowed
		if !decs[j].Allowed {
			checks[i].outcome, overall = storecall.OutcomeDenied, storecall.OutcomeDenied
		}
	}
	return overall, nil
}

// decideAlone decides a check that is not part of the request's set: one
// that can never be admitted, a shadow one or a look. It returns an error
// only when the caller went away.
func (s *Server) decideAlone(ctx context.Context, domain string, c *check) error {
	var r storecall.Result
	switch c.kind {
	case kindDenied:
		c.outcome = storecall.OutcomeDenied
		if c.rule.shadow {
			c.outcome = storecall.OutcomeShadowDenied
		}
		return nil
	case kindShadow:
		// A shadow descriptor never refuses: one the store cannot decide
		// is let through.
		r, _ = s.callStore(ctx, domain, func(ctx context.Context) (err error) {
			c.dec, err = s.store.Allow(ctx, c.req)
			return err
		})
		c.decided, c.outcome = r == storecall.Decided, storecall.OutcomeFailOpen
		if c.decided {
			c.outcome = storecall.OutcomeAllowed
			if !c.dec.Allowed {
				c.outcome = storecall.OutcomeShadowDenied
			}
		}
	case kindPeek:
		if c.rule.deny {
			return nil // nothing is ever admitted: OK, nothing remaining
		}
		r, _ = s.callStore(ctx, domain, func(ctx context.Context) (err error) {
			c.req.Cost = 0
			c.dec, err = s.store.Peek(ctx, c.req)
			return err
		})
		c.decided, c.outcome = r == storecall.Decided, storecall.OutcomePeeked
	}
	if r == storecall.Canceled {
		return status.FromContextError(ctx.Err()).Err()
	}
	return nil
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
	case s.opts.failMode == FailOpen:
		return storecall.OutcomeFailOpen, nil
	}
	return storecall.OutcomeFailClosed, status.Error(codes.Unavailable, "rate limit service unavailable: its store cannot decide")
}
