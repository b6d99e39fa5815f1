package engine

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/idempotency"
	"github.com/tollgate/tollgate/keyfunc"
)

// prepare finds the check's identity, limits and cost and builds its
// requests, or fills its result with the refusal.
func (l *Limiter) prepare(c *check, call Call) {
	p, res := c.p, &c.res
	key, value, ok := identity(c.ctx, p, call.Method, res)
	if !ok {
		return
	}
	var requestID string
	if p.priced {
		id, err := idempotency.FromIncoming(c.ctx, l.header)
		if err != nil {
			res.reject(outcomeInvalid, codes.InvalidArgument, err, "rate limit %q: %v", p.rule.Name, err)
			return
		}
		requestID = id
	}
	ov, found, err := l.overrideOf(c.ctx, p, key)
	c.overridesErr = err
	if found {
		if len(ov.limits) == 0 {
			until := "until it is deleted"
			if !ov.expires.IsZero() {
				until = "for " + roundUp(l.clk.until(ov.expires), time.Second).String()
			}
			res.reject(outcomeBlocked, codes.PermissionDenied, nil, "rate limit %q: the caller is blocked by an override, %s", p.rule.Name, until)
			return
		}
		c.limits = p.overrideLimits(ov.limits)
	} else if c.limits, ok = p.limitsFor(c.ctx, value, res); !ok {
		return
	}
	cost, ok := costFor(c.ctx, p, call.Method, call.Request, c.limits, res)
	if !ok {
		return
	}
	res.cost = cost
	c.reqs, c.decs = c.reqBuf[:], c.decBuf[:]
	if n := len(c.limits); n > 1 {
		c.reqs, c.decs = make([]tollgate.Request, n), nil // decs: the store's own answers (ask)
	}
	for i, lp := range c.limits {
		k := lp.key(key)
		if len(k) > tollgate.MaxKeyLen {
			res.reject(outcomeInvalid, codes.InvalidArgument, nil, "rate limit %q: the caller's identity is %d bytes, more than %d", p.rule.Name, len(value), tollgate.MaxKeyLen-len(k)+len(value))
			return
		}
		c.reqs[i] = tollgate.Request{Key: k, Limit: lp.limit, Cost: cost, RequestID: requestID}
	}
	if len(c.limits) == 0 {
		c.reqs, c.decs = nil, nil // an in-flight limit alone
	}
	if p.inFlight != nil {
		c.prepareSeat(c.ctx, key, requestID, call.Stream)
	}
}

// identity returns the store key for the call and the key function's value
// in it, or fills res with the rejection.
func identity(ctx context.Context, p *plan, method string, res *result) (key, value string, ok bool) {
	r := p.rule
	value, err := r.Key(ctx, method)
	anonymous := false
	switch {
	case err == nil:
	case errors.Is(err, keyfunc.ErrMissing) && r.OnMissingKey == ShareMissing:
		anonymous, value = true, ""
	case errors.Is(err, keyfunc.ErrMissing), errors.Is(err, keyfunc.ErrInvalid):
		res.reject(outcomeInvalid, codes.InvalidArgument, err, "rate limit %q cannot identify the caller: %v", r.Name, err)
		return "", "", false
	default:
		res.fail(outcomeError, err, "rate limit %q: key function failed: %v", r.Name, err)
		return "", "", false
	}
	return p.key(value, anonymous), value, true
}

// costFor returns the cost of the call, or fills res with the rejection.
func costFor(ctx context.Context, p *plan, method string, req any, limits []limitPlan, res *result) (int64, bool) {
	if !p.priced {
		return 1, true
	}
	r := p.rule
	cost := r.Cost
	fromFunc := r.CostFunc != nil && req != nil
	if fromFunc {
		cost = r.CostFunc(ctx, method, req)
		if cost < 0 {
			res.reject(outcomeInvalid, codes.Internal, nil, "rate limit %q: CostFunc returned %d, a negative cost", r.Name, cost)
			return 0, false
		}
	}
	cost = max(cost, 1)
	for _, lp := range limits {
		limit := lp.limit
		if capacity := limit.Capacity(); cost > capacity {
			if fromFunc {
				res.reject(outcomeInvalid, codes.InvalidArgument, nil, "rate limit %q: the request costs %d, more than the %d it can ever admit at once (%s)", r.Name, cost, capacity, limit)
			} else {
				res.reject(outcomeInvalid, codes.Internal, nil, "rate limit %q: cost %d exceeds the capacity %d of %s returned by the limit function", r.Name, cost, capacity, limit)
			}
			return 0, false
		}
	}
	return cost, true
}
