package engine

import (
	"context"

	"github.com/tollgate/tollgate"
)

// appendLimits appends to out the state of every limit of the enforcing
// checks that a store decided, as res (their call's result) left it, and
// names each as every door reports it (LimitDecision.Policy).
func (l *Limiter) appendLimits(ctx context.Context, out []LimitDecision, enforcing []*check, res result) []LimitDecision {
	if res.err != nil {
		l.undebited(ctx, enforcing)
	}
	for _, c := range enforcing {
		name := c.p.rule.Name
		if c.res.hasDecision() && !c.seat.refused() {
			for i, d := range c.decs {
				out = append(out, LimitDecision{Rule: name, Policy: name, Limit: c.limits[i].limit, Decision: d, Denied: c.denies(d)})
			}
		}
		if s := c.seat; s != nil && s.asked {
			d := tollgate.Decision{Allowed: s.dec.Allowed, Remaining: max(s.req.Max-s.dec.InUse, 0)}
			if s.refused() {
				d.RetryAfter = seatRetryAfter(c)
			}
			out = append(out, LimitDecision{Rule: name, Policy: name, MaxInFlight: s.req.Max, Decision: d, Denied: s.refused()})
		}
	}
	namePolicies(out)
	return out
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

// namePolicies names every limit of limits as the doors report it: by its
// rule, and, where the rule decided several, by the limit's part too.
func namePolicies(limits []LimitDecision) {
	if len(limits) < 2 {
		return
	}
	for i := range limits {
		ld := &limits[i]
		n := 0
		for _, o := range limits {
			if o.Rule == ld.Rule {
				n++
			}
		}
		if n == 1 {
			continue
		}
		if ld.Limit == (tollgate.Limit{}) {
			ld.Policy = ld.Rule + "/in-flight"
			continue
		}
		part := limitPart(ld.Limit)
		ld.Policy = ld.Rule + "/" + part
		for j, o := range limits {
			if j != i && o.Rule == ld.Rule && o.Limit != (tollgate.Limit{}) && limitPart(o.Limit) == part {
				// Two limits of one period, of different algorithms.
				ld.Policy += "/" + ld.Limit.Algorithm.String()
				break
			}
		}
	}
}
