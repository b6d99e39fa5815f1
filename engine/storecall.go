package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/storecall"
)

// replayMargin is added to a call's time left when it sets how long the
// store remembers the call's request id: a retry of the call arrives within
// the call's deadline, give or take the clocks and the network.
const replayMargin = 500 * time.Millisecond

// run asks the store to decide checks (all ready), all or nothing, and
// fills their results; when the store cannot decide, each rule's FailMode
// applies.
func (l *Limiter) run(ctx context.Context, checks []*check) {
	if len(checks) == 0 {
		return
	}
	for _, c := range checks {
		if c.overridesErr != nil {
			// Decided on overrides no fresher than the refresh delay: the
			// store could not say, so the fail policy decides.
			l.failSet(ctx, checks, c.overridesErr)
			return
		}
	}
	call, ok := l.calls.Begin(ctx)
	if !ok {
		l.failSet(ctx, checks, storecall.ErrBreakerOpen)
		return
	}
	if deadline, ok := ctx.Deadline(); ok {
		// The call's own deadline, before the store's shorter one wraps it.
		setReplayTTL(checks, max(deadline.Sub(call.Start), 0)+replayMargin)
	}
	err := l.askAll(call.Ctx, l.store, checks, false)
	r, elapsed := call.End(err)
	if r.Measured() {
		for _, c := range checks {
			l.recordStore(ctx, c.p, elapsed, r == storecall.Failed)
		}
	}
	switch r {
	case storecall.Decided:
		if !judge(checks) {
			l.releaseAll(ctx, checks)
		}
	case storecall.Invalid:
		// A configuration the checks above let through; the store is fine.
		for _, c := range checks {
			c.res.reject(outcomeInvalid, Fault, err, "rate limit %q: the limiter is misconfigured: %v", c.p.rule.Name, err)
		}
	case storecall.Canceled:
		// The caller cancelled or ran out of time, not the store.
		for _, c := range checks {
			c.res.reject(outcomeCanceled, Canceled, ctx.Err(), "rate limit %q: the call ended before the store answered: %v", c.p.rule.Name, ctx.Err())
		}
	default:
		l.failSet(ctx, checks, err)
	}
}

// askAll asks st for the seats of checks, then, when every seat was
// given, for their rate limits: a call refused for lack of a seat debits
// no rate. A store failure gives back the seats taken. local: st is
// FailLocal's store, whose seats are the per-replica caps.
func (l *Limiter) askAll(ctx context.Context, st tollgate.Store, checks []*check, local bool) error {
	if sa, ok := st.(tollgate.SeatAllower); ok && !local {
		if done, err := l.askWithSeat(ctx, sa, checks); done {
			return err
		}
	}
	got, err := l.acquire(ctx, st, checks, local)
	if err != nil || !got {
		return err
	}
	rated := only(checks, func(c *check) bool { return len(c.reqs) > 0 })
	if len(rated) == 0 {
		return nil
	}
	if err := ask(ctx, st, rated); err != nil {
		l.releaseAll(ctx, checks)
		return err
	}
	return nil
}

// askWithSeat asks st for the one seat of checks and their rate limits in
// one step, when exactly one check has a seat and some have rates; it
// reports whether it could (done), and then the store's error.
func (l *Limiter) askWithSeat(ctx context.Context, st tollgate.SeatAllower, checks []*check) (done bool, err error) {
	var seatted *check
	for _, c := range checks {
		if c.seat != nil {
			if seatted != nil {
				return false, nil
			}
			seatted = c
		}
	}
	rated := only(checks, func(c *check) bool { return len(c.reqs) > 0 })
	if seatted == nil || len(rated) == 0 {
		return false, nil
	}
	reqs := rated[0].reqs
	if len(rated) > 1 {
		reqs = nil
		for _, c := range rated {
			reqs = append(reqs, c.reqs...)
		}
	}
	sd, decs, err := st.AllowAllWithSeat(ctx, seatted.seat.req, reqs)
	if err != nil {
		return true, err
	}
	s := seatted.seat
	s.asked, s.dec = true, sd
	if decs == nil {
		l.recordSeat(ctx, seatted.p, seatDeniedOutcome)
		return true, nil
	}
	if len(decs) != len(reqs) {
		return true, fmt.Errorf("engine: the store answered %d decisions for %d requests", len(decs), len(reqs))
	}
	if sd.Allowed {
		l.recordSeat(ctx, seatted.p, seatAcquired)
		s.store, s.local, s.at = st, false, l.clk.now()
	} else {
		s.dec.Allowed = true // a seat was free; the rates refused the call
	}
	for _, c := range rated {
		n := len(c.reqs)
		if n == 1 && cap(c.decs) >= 1 {
			c.decs = c.decs[:1]
			c.decs[0] = decs[0]
		} else {
			c.decs = decs[:n:n]
		}
		decs = decs[n:]
	}
	return true, nil
}

// setReplayTTL bounds how long the store remembers the request ids of checks.
func setReplayTTL(checks []*check, ttl time.Duration) {
	for _, c := range checks {
		for i := range c.reqs {
			if c.reqs[i].RequestID != "" {
				c.reqs[i].ReplayTTL = ttl
			}
		}
	}
}

// failSet applies each rule's FailMode to checks after the store failed
// with cause. A fail-closed rule refuses the call, and then no local
// decision is made; otherwise the fail-local rules decide together, all or
// nothing, on the local store under their local caps, and fail-open rules
// admit.
func (l *Limiter) failSet(ctx context.Context, checks []*check, cause error) {
	closed := false
	var local []*check
	for _, c := range checks {
		c.res.storeFailed, c.res.cause = true, cause
		switch c.p.rule.FailMode {
		case FailOpen:
			c.res.outcome = outcomeFailOpen
		case FailClosed:
			c.res.failClosed(c.p.rule.Name)
			closed = true
		case FailLocal:
			local = append(local, c)
		}
	}
	if len(local) == 0 {
		return
	}
	for _, c := range local {
		c.local = true
		// The local caps replace the limits; a check's limits may be its
		// plan's, so they are copied, not changed.
		limits := make([]limitPlan, len(c.limits))
		for i, lp := range c.limits {
			limits[i] = limitPlan{limit: lp.local}
			c.reqs[i].Limit = lp.local
			if c.reqs[i].Cost > lp.local.Capacity() {
				// No local decision could ever admit it: refuse it as
				// FailClosed does.
				c.res.failClosed(c.p.rule.Name)
				closed = true
			}
		}
		c.limits = limits
	}
	if closed {
		for _, c := range local {
			if c.res.err == nil {
				c.res.skip()
			}
		}
		return
	}
	if err := l.askAll(ctx, l.local, local, true); err != nil {
		for _, c := range local {
			c.res.cause = errors.Join(cause, err)
			c.res.failClosed(c.p.rule.Name)
		}
		return
	}
	if !judge(local) {
		l.releaseAll(ctx, local)
	}
	for _, c := range local {
		if c.res.outcome != outcomeSkipped {
			c.res.outcome = outcomeFailLocal
		}
	}
}
