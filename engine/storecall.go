package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/storecall"
	"github.com/tollgate/tollgate/internal/telemetry"
	"go.opentelemetry.io/otel/metric"
)

// replayMargin is added to a call's time left when it sets how long the
// store remembers the call's request id: a retry of the call arrives within
// the call's deadline, give or take the clocks and the network.
const replayMargin = 500 * time.Millisecond

// runAll asks the store to decide the enforcing checks that prepare did
// not refuse, all or nothing (run); asks once more when they were denied on
// keys this replica still owed end-of-call work on, once it is delivered
// (ownWorkOwed); then, when they admitted the call, decides the shadow
// checks, so that a shadow denial never blocks or undoes an enforcing
// debit and only calls that go on are counted against a rule on trial.
// The seats of a call refused are given back. It reports whether the call
// was refused.
func (l *Limiter) runAll(ctx context.Context, enforcing, shadows []*check) bool {
	refused := refusedAny(enforcing)
	if !refused {
		owedBefore := l.sender.owes(enforcing, false)
		for retried := false; ; retried = true {
			l.run(ctx, ready(enforcing))
			refused = refusedAny(enforcing)
			if !refused || retried || !l.ownWorkOwed(ctx, enforcing, owedBefore) {
				break
			}
			for _, c := range enforcing {
				c.retry()
			}
		}
	}
	if !refused {
		l.run(ctx, ready(shadows))
		return false
	}
	l.releaseAll(ctx, enforcing)
	return true
}

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
	if deadline, ok := ctx.Deadline(); ok {
		// The call's own deadline, before the store's shorter one wraps it.
		setReplayTTL(checks, max(time.Until(deadline), 0)+replayMargin)
	}
	// Open and End rather than Do: no closure's frame on the way down.
	r, elapsed, err := storecall.Unasked, time.Duration(0), storecall.ErrBreakerOpen
	if call, ok := l.calls.Open(ctx); ok {
		err = l.askAll(call.Ctx, l.store, checks, false)
		r, elapsed = call.End(err)
	}
	if r.Measured() {
		for _, c := range checks {
			c.store = storeCall{measured: true, failed: r == storecall.Failed, elapsed: elapsed}
		}
	}
	switch r {
	case storecall.Decided:
		if l.health.down.Load() {
			l.health.answered(l.clk.now())
		}
		if !judge(checks) {
			l.releaseAll(ctx, checks)
		}
	case storecall.Invalid:
		// A configuration the checks above let through; the store is fine.
		for _, c := range checks {
			c.res.reject(outcomeInvalid, Fault, err, "rate limit %q: the limiter is misconfigured: %v", c.p.rule.Name, err)
		}
	case storecall.Failed, storecall.Unasked: // Unasked: the breaker is open
		l.failSet(ctx, checks, err)
	default: // storecall.Canceled
		// The caller cancelled or ran out of time, not the store.
		gone := ctx.Err()
		for _, c := range checks {
			msg := fmt.Sprintf("rate limit %q: the call ended before the store answered: %v", c.p.rule.Name, gone)
			c.res.outcome, c.res.err, c.res.cause = outcomeCanceled, &refusal{kind: Canceled, msg: msg, cause: gone}, gone
		}
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
	l.health.failed(l.clk.now(), checks, cause)
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

// ownWorkOwed reports whether checks were denied by the store on keys on
// which this replica's sender owed end-of-call work when they were sent
// (owedBefore) or owes it now, once it is delivered (waiting within the
// store deadline): a caller's next call on the same replica sees its last
// call's settlement and release.
func (l *Limiter) ownWorkOwed(ctx context.Context, checks []*check, owedBefore bool) bool {
	keys := checkKeys(checks, true)
	if keys == nil || !owedBefore && !l.sender.owesKeys(keys) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, l.storeTimeout)
	defer cancel()
	return l.sender.waitOwed(ctx, keys) == nil
}

// checkKeys returns the store keys of checks (only the denied ones'
// when denied is set), as the sender counts them.
func checkKeys(checks []*check, denied bool) []string {
	var keys []string
	for _, c := range checks {
		if denied && c.res.outcome != outcomeDenied {
			continue
		}
		for _, r := range c.reqs {
			keys = append(keys, r.Key)
		}
		if c.seat != nil {
			keys = append(keys, seatKeyMark+c.seat.req.Key)
		}
	}
	return keys
}

// ask sends the requests of checks to st, with Allow for a single request
// and AllowAll for more, and gives each check its decisions: a single
// request's in the check, several as parts of the store's answer.
func ask(ctx context.Context, st tollgate.Store, checks []*check) error {
	if len(checks) == 1 && len(checks[0].reqs) == 1 {
		c := checks[0]
		d, err := st.Allow(ctx, c.reqs[0])
		c.decs[0] = d
		return err
	}
	reqs := checks[0].reqs // one check's several limits: its requests as they are
	if len(checks) > 1 {
		n := 0
		for _, c := range checks {
			n += len(c.reqs)
		}
		reqs = make([]tollgate.Request, 0, n)
		for _, c := range checks {
			reqs = append(reqs, c.reqs...)
		}
	}
	decs, err := st.AllowAll(ctx, reqs)
	if err != nil {
		return err
	}
	if len(decs) != len(reqs) {
		return fmt.Errorf("engine: the store answered %d decisions for %d requests", len(decs), len(reqs))
	}
	for _, c := range checks {
		n := len(c.reqs)
		c.decs, decs = decs[:n:n], decs[n:]
	}
	return nil
}

// judge fills the result of every check from its decisions, all of one
// store call, and reports whether they admitted the call. A check refused
// for lack of a seat denies it alone: the others were not asked.
func judge(checks []*check) bool {
	for _, c := range checks {
		if c.seat.refused() {
			for _, o := range checks {
				if o == c {
					o.res.seatDenied(o)
				} else {
					o.res.skip()
				}
			}
			return false
		}
	}
	admitted, waits := true, false
	for _, c := range checks {
		for _, d := range c.decs {
			admitted = admitted && d.Allowed
			waits = waits || (!d.Allowed && d.RetryAfter > 0)
		}
	}
	for _, c := range checks {
		c.refused, c.waits = !admitted, waits
		c.res.decided(c)
	}
	return admitted
}

// acquire takes the seats of checks on st, in order: all or none. It
// reports whether every check got its seat; a check that did not is
// marked, and the seats taken before it are given back.
func (l *Limiter) acquire(ctx context.Context, st tollgate.Store, checks []*check, local bool) (bool, error) {
	ss, _ := st.(tollgate.SeatStore)
	for i, c := range checks {
		if c.seat == nil {
			continue
		}
		s := c.seat.req
		if local {
			s.Max = c.p.inFlight.localMax
		}
		d, err := ss.AcquireSeat(ctx, s)
		if err != nil {
			l.releaseAll(ctx, checks[:i])
			return false, err
		}
		c.seat.asked, c.seat.dec = true, d
		l.recordSeat(ctx, c.p, map[bool]seatOutcome{true: seatAcquired, false: seatDeniedOutcome}[d.Allowed])
		if !d.Allowed {
			l.releaseAll(ctx, checks[:i])
			return false, nil
		}
		c.seat.store, c.seat.local, c.seat.at = ss, local, l.clk.now()
	}
	return true, nil
}

// releaseAll gives back the seats checks hold: their call does not go on.
// The releases go to the sender, as a call's end does.
func (l *Limiter) releaseAll(ctx context.Context, checks []*check) {
	var e ending
	for _, c := range checks {
		if !c.seat.holding() {
			continue
		}
		e.seats = append(e.seats, &heldSeat{l: l, ctx: ctx, p: c.p, st: c.seat.store, seat: c.seat.req, local: c.seat.local, at: c.seat.at})
		c.seat.store = nil
	}
	l.sender.add(l, &e)
}

// seatCall calls the store for a seat: the shared store under its policy
// (deadline, breaker), the local one as it is.
func (l *Limiter) seatCall(ctx context.Context, local bool, call func(context.Context) error) error {
	if local {
		return call(ctx)
	}
	_, _, err := l.calls.Do(ctx, call)
	return err
}

// recordSeat counts one seat event of p.
func (l *Limiter) recordSeat(ctx context.Context, p *plan, o seatOutcome) {
	l.seatTel.events.Add(ctx, 1, metric.WithAttributes(telemetry.AttrRule.String(p.rule.Name), telemetry.AttrSeatOutcome.String(seatOutcomeNames[o])))
}
