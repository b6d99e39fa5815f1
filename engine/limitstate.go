package engine

import (
	"context"

	"github.com/tollgate/tollgate"
)

// collectLimits collects in out the state of every limit of the enforcing
// checks that a store decided, as res (their call's result) left it, each
// named as every door reports it (LimitDecision.Policy). One limit is kept
// in out itself, so that the common call allocates nothing for it.
func (l *Limiter) collectLimits(ctx context.Context, out *limitList, enforcing []*check, res *result) {
	if res.err != nil {
		l.undebited(ctx, enforcing)
	}
	*out = limitList{}
	n := 0
	for _, c := range enforcing {
		n += c.stated()
	}
	if n > 1 {
		out.many = make([]LimitDecision, 0, n)
	}
	for _, c := range enforcing {
		if c.stated() == 0 {
			continue
		}
		name := c.p.rule.Name
		several := c.stated() > 1
		if c.res.hasDecision() && !c.seat.refused() {
			for i, d := range c.decs {
				lp := &c.limits[i]
				policy := name
				if several {
					policy = lp.policyName(name, c.limits)
				}
				out.add(LimitDecision{Rule: name, Policy: policy, Limit: lp.limit, Decision: d, Denied: c.denies(d)})
			}
		}
		if s := c.seat; s != nil && s.asked {
			d := tollgate.Decision{Allowed: s.dec.Allowed, Remaining: max(s.req.Max-s.dec.InUse, 0)}
			if s.refused() {
				d.RetryAfter = seatRetryAfter(c)
			}
			policy := name
			if several {
				policy = c.p.inFlight.policy
			}
			out.add(LimitDecision{Rule: name, Policy: policy, MaxInFlight: s.req.Max, Decision: d, Denied: s.refused()})
		}
	}
}

// replayed reports whether a decision of the checks replayed a request id:
// a door reports that on every admitted call (x-ratelimit-replayed).
func replayed(checks []*check) bool {
	for _, c := range checks {
		for _, d := range c.decs {
			if d.Replayed {
				return true
			}
		}
	}
	return false
}

// add appends ld.
func (ll *limitList) add(ld LimitDecision) {
	if ll.many != nil {
		ll.many = append(ll.many, ld)
		return
	}
	ll.one[0], ll.n = ld, 1
}

// stated counts the limits of c whose state a store decided: its rates and
// its seat.
func (c *check) stated() int {
	n := 0
	if c.res.hasDecision() && !c.seat.refused() {
		n = len(c.decs)
	}
	if c.seat != nil && c.seat.asked {
		n++
	}
	return n
}

// undebited replaces, in checks refused as a set, the decision of every
// limit that would have admitted the call with the limit's state as it is:
// the store answers those as if debited (AllowAll), or not at all (a
// Cluster's part it did not ask), but a denied call debits nothing. A
// store that decides in process answers at once; another is asked under
// the store policy, and when it cannot answer the limit reports what the
// set's answer implies: its remaining units less nothing.
func (l *Limiter) undebited(ctx context.Context, checks []*check) {
	for _, c := range checks {
		if !c.refused || !c.res.hasDecision() {
			continue
		}
		for i, d := range c.decs {
			if c.denies(d) {
				continue
			}
			c.decs[i] = l.stateOf(ctx, c.reqs[i], d, c.local)
		}
	}
}

// stateOf returns the state of req's identity under its limit now, asked
// with the largest cost the limit admits: a request the store denies
// reports the identity's remaining units and reset undebited, and one it
// admits finds the identity full; local: req was decided on FailLocal's
// store. d is the set's answer for req, kept
// (with req's cost given back) when the store cannot say.
func (l *Limiter) stateOf(ctx context.Context, req tollgate.Request, d tollgate.Decision, local bool) tollgate.Decision {
	capacity := req.Limit.Capacity()
	probe := tollgate.Request{Key: req.Key, Limit: req.Limit, Cost: capacity}
	var p tollgate.Decision
	var err error
	if local {
		p, err = l.local.Peek(ctx, probe)
	} else {
		_, _, err = l.calls.Do(ctx, func(ctx context.Context) (err error) {
			p, err = l.store.Peek(ctx, probe)
			return err
		})
	}
	if err != nil {
		d.Remaining = min(d.Remaining+max(req.Cost, 1), capacity)
		return d
	}
	if p.Allowed {
		p = tollgate.Decision{Remaining: capacity, At: p.At}
	}
	p.Allowed, p.RetryAfter, p.Debt = false, 0, 0
	return p
}

// policyName names lp, one of limits of a rule named rule that decided
// several limits of a call: the rule, "/" and the limit's part (its period
// or calendar unit), and "/" and its algorithm when another of limits has
// the same part. A rule's fixed limits have their names made once (plan).
func (lp *limitPlan) policyName(rule string, limits []limitPlan) string {
	if lp.policy != "" {
		return lp.policy
	}
	return policyOf(rule, lp.limit, limits)
}

// policyOf names limit, one of limits of rule (see limitPlan.policyName).
func policyOf(rule string, limit tollgate.Limit, limits []limitPlan) string {
	part := limitPart(limit)
	for _, o := range limits {
		if o.limit != limit && limitPart(o.limit) == part {
			// Two limits of one period, of different algorithms.
			return rule + "/" + part + "/" + limit.Algorithm.String()
		}
	}
	return rule + "/" + part
}
