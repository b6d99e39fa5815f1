package engine

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/partkey"
	"github.com/tollgate/tollgate/keyfunc"
)

// prepare finds the check's identity, limits and cost and builds its
// requests, or fills its result with the refusal. id is the call's request
// id, or the error reading it; a check that is not priced sends none.
func (l *Limiter) prepare(c *check, call *Call, id requestID) {
	p, res := c.p, &c.res
	if call.NoEnd && p.inFlight != nil {
		// The seat could never be given back.
		res.reject(outcomeInvalid, Fault, nil, "rate limit %q bounds calls in flight, and this door cannot see a call end: use a door that does (the gRPC interceptors, httplimit, connectlimit)", p.rule.Name)
		return
	}
	key, value, ok := identity(c.ctx, p, call, res)
	if !ok {
		return
	}
	c.who = value
	var requestID string
	if p.priced {
		if id.err != nil {
			res.reject(outcomeInvalid, Invalid, id.err, "rate limit %q: %v", p.rule.Name, id.err)
			return
		}
		requestID = id.id
	}
	ov, found, stat, err := l.overrideOf(c.ctx, p, key)
	c.overridesErr, c.store = err, stat
	if found {
		if len(ov.limits) == 0 {
			until := "until it is deleted"
			if !ov.expires.IsZero() {
				until = "for " + roundUp(l.clk.until(ov.expires), time.Second).String()
			}
			res.reject(outcomeBlocked, Blocked, nil, "rate limit %q: the caller is blocked by an override, %s", p.rule.Name, until)
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
			res.reject(outcomeInvalid, Invalid, nil, "rate limit %q: the caller's identity is %d bytes, more than %d", p.rule.Name, len(value), tollgate.MaxKeyLen-len(k)+len(value))
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
func identity(ctx context.Context, p *plan, call *Call, res *result) (key, value string, ok bool) {
	r := p.rule
	value, err := r.Key(ctx, keyfunc.Call{Method: call.Method, Header: call.Header, Peer: call.Peer})
	anonymous := false
	switch {
	case err == nil:
	case errors.Is(err, keyfunc.ErrMissing) && r.ShareMissing:
		anonymous, value = true, ""
	case errors.Is(err, keyfunc.ErrMissing), errors.Is(err, keyfunc.ErrInvalid):
		res.reject(outcomeInvalid, Invalid, err, "rate limit %q cannot identify the caller: %v", r.Name, err)
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
			res.reject(outcomeInvalid, Fault, nil, "rate limit %q: CostFunc returned %d, a negative cost", r.Name, cost)
			return 0, false
		}
	}
	cost = max(cost, 1)
	for _, lp := range limits {
		limit := lp.limit
		if capacity := limit.Capacity(); cost > capacity {
			if fromFunc {
				res.reject(outcomeInvalid, Invalid, nil, "rate limit %q: the request costs %d, more than the %d it can ever admit at once (%s)", r.Name, cost, capacity, limit)
			} else {
				res.reject(outcomeInvalid, Fault, nil, "rate limit %q: cost %d exceeds the capacity %d of %s returned by the limit function", r.Name, cost, capacity, limit)
			}
			return 0, false
		}
	}
	return cost, true
}

// key returns the store key of value, or of the anonymous identity.
func (p *plan) key(value string, anonymous bool) string {
	if anonymous {
		return p.anon
	}
	return p.prefix + value
}

// key returns the store key of lp's state for the identity whose key is
// identity.
func (lp *limitPlan) key(identity string) string {
	if lp.part == "" {
		return identity
	}
	return partkey.Join(identity, lp.part)
}

// prepareSeat fills c's seat request for the identity key under ctx's
// deadline: the call's request id names it, so that a retry reuses it.
func (c *check) prepareSeat(ctx context.Context, key, requestID string, stream bool) {
	f := c.p.inFlight
	ttl := f.ttl
	if deadline, ok := ctx.Deadline(); ok && !stream {
		ttl = max(time.Until(deadline), 0) + seatMargin
	}
	id := requestID
	if id == "" {
		id = newSeatID()
	}
	c.seat = &seatCheck{req: tollgate.Seat{Key: key, Max: f.max, ID: id, TTL: ttl}, stream: stream}
}

// newSeatID names the seat of a call that came without a request id.
func newSeatID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "seat-" + base64.RawURLEncoding.EncodeToString(b[:])
}
