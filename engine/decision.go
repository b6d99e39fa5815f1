package engine

import (
	"context"
	"fmt"

	"math"
	"sync"
	"time"

	argcheck "github.com/tollgate/tollgate/internal/check"

	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/keyfunc"
)

// check is one rule's part in the decision on a call (or a stream message):
// its span, its requests to the store (one per limit) and its result.
//
// A call's checks are decided together. The ready enforcing checks go to
// the store as one set, all or nothing: Store.Allow for a single request
// (the common case, which keeps the store's fast paths), Store.AllowAll for
// more. Shadow checks are a second set, decided only when the first
// admitted the call, so that a shadow denial never blocks or undoes an
// enforcing debit and only calls that would otherwise go on are counted
// against a rule on trial.
type check struct {
	p    *plan
	ctx  context.Context // carries the check's span
	span trace.Span
	res  result
	// limits are the caller's limits, reqs the requests for them and decs
	// the store's answers: one each, in order.
	limits []limitPlan
	reqs   []tollgate.Request
	decs   []tollgate.Decision
	// refused and waits describe the store call the check was decided in:
	// the set was refused, and some decision of the set named a wait.
	refused, waits bool
	// seat is the in-flight seat of a rule with InFlight; nil without.
	seat *seatCheck
	// local: the check was decided on FailLocal's store.
	local bool
	// who is the key function's value: the identity (refused.go).
	who string
	// store is the store call the check was decided in (or the override
	// check it made), for the store latency metric.
	store storeCall
	// overridesErr: the overrides could not be confirmed fresh, so the
	// check is decided by its rule's FailMode (run).
	overridesErr error
	// reqBuf and decBuf hold reqs and decs for a single limit, so that the
	// common call allocates neither (BenchmarkUnaryAdmit).
	reqBuf [1]tollgate.Request
	decBuf [1]tollgate.Decision
}

// denies reports whether d, one of c's decisions, is one that refused the
// set: not allowed, and with a wait unless no decision of the set had one
// (AllowAll gives RetryAfter 0 to those that would have been admitted).
func (c *check) denies(d tollgate.Decision) bool {
	return c.refused && !d.Allowed && (d.RetryAfter > 0 || !c.waits)
}

// denied reports whether some of c's limits refused its set.
func (c *check) denied() bool {
	for _, d := range c.decs {
		if c.denies(d) {
			return true
		}
	}
	return false
}

// decide decides a call (or one stream message) under set and returns
// what the call gets: when it is admitted, what its rules are owed once it
// ends (settlements, seats to release), or nil; and its refusal (nil
// admits it). The state of every enforcing limit is collected in out (see
// LimitDecision). A refusal the rules let the call wait out is waited out,
// within ctx and their bound, asking again after each suggested wait: a
// stream opening that found no free seat (InFlight.StreamWait), a stream
// message a Shape rule denied (PerMessage).
//
// Its frames and those below it are kept small, call and results passed
// by pointer: a gRPC handler's goroutine starts with a small stack, and a
// call that outgrows it pays for copying it (docs/performance.md).
func (l *Limiter) decide(ctx context.Context, set *planSet, call *Call, out *limitList) (*afterCall, error) {
	var res result
	var start time.Time // of the first wait
	var waited time.Duration
	for {
		after := l.decideOnce(ctx, set, call, out, &res)
		waits := res.seatWait || res.shape && res.hasDecision()
		if res.err == nil || !waits {
			if waited > 0 && res.seatWait || waited > 0 && call.Stream {
				l.seatTel.wait.Record(ctx, l.clk.since(start).Seconds(), set.plans[0].tel.rule...)
			}
			return after, res.err
		}
		// A zero wait would spin, so wait at least 1ms.
		wait := max(res.decision.RetryAfter, time.Millisecond)
		if waited+wait > res.maxShapeWait {
			return after, res.err
		}
		if waited == 0 {
			start = l.clk.now()
		}
		waited += wait
		if err := l.clk.sleep(ctx, wait); err != nil {
			*out = limitList{}
			msg := fmt.Sprintf("rate limit %q: the call ended while held back: %v", set.plans[0].rule.Name, err)
			return nil, &refusal{kind: Canceled, msg: msg, cause: err}
		}
	}
}

// decideOnce decides the call once, into res: each rule of set is one
// check (a single rule's from a pool, as a check on the stack would
// escape: its requests point into it).
func (l *Limiter) decideOnce(ctx context.Context, set *planSet, call *Call, out *limitList, res *result) (after *afterCall) {
	var one [1]*check
	all := one[:]
	if len(set.plans) == 1 {
		one[0] = checks.Get().(*check)
		one[0].p = set.plans[0]
	} else {
		cs := make([]check, len(set.plans))
		all = make([]*check, len(set.plans))
		for i, p := range set.plans {
			cs[i].p = p
			all[i] = &cs[i]
		}
	}
	l.decideChecks(ctx, all, set.enforcing, call, res)
	if res.err != nil || !call.QuietAdmitted || replayed(all[:set.enforcing]) {
		l.collectLimits(ctx, out, all[:set.enforcing], res)
	} else {
		out.n, out.many = 0, nil
	}
	if set.owes && res.err == nil && !call.NoEnd {
		// A call whose door never ends it owes nothing: its settlements
		// are dropped (the reservations stand), and it took no seat
		// (prepare).
		after = l.owed(ctx, all)
	}
	if len(set.plans) == 1 {
		*one[0] = check{}
		checks.Put(one[0])
	}
	return after
}

// checks recycles the check of single-rule decisions (BenchmarkUnaryAdmit).
var checks = sync.Pool{New: func() any { return new(check) }}

// decideChecks decides checks, of which the first n are enforcing and the
// rest shadow: each is prepared (its identity, limits and requests) under
// a span of its own, then the store decides them (run), and their results
// make the call's (res); every decision is recorded.
func (l *Limiter) decideChecks(ctx context.Context, checks []*check, n int, call *Call, res *result) {
	enforcing, shadows := checks[:n], checks[n:]
	var id requestID
	if checks[0].p.priced { // every check of a set has one scope
		id = l.requestID(call.Header)
	}
	for _, c := range checks {
		c.ctx, c.span = l.tel.start(ctx, c.p)
		l.prepare(c, call, id)
	}
	refused := l.runAll(ctx, enforcing, shadows)
	if refused {
		for _, c := range checks {
			if c.res.err == nil {
				c.res.skip()
			}
		}
	}
	verdict(enforcing, res)
	for _, c := range shadows {
		c.res.shadowed(refused)
	}
	l.observeRefused(checks)
	l.tel.recordAll(checks)
}

// retry makes c ready to be asked again, as prepare left it.
func (c *check) retry() {
	c.res = result{cost: c.res.cost}
	c.refused, c.waits = false, false
	if c.seat != nil {
		c.seat.asked, c.seat.dec = false, tollgate.SeatDecision{}
	}
	switch len(c.reqs) {
	case 0:
		c.decs = nil
	case 1:
		c.decs = c.decBuf[:]
	default:
		c.decs = nil
	}
}

func refusedAny(checks []*check) bool {
	for _, c := range checks {
		if c.res.err != nil {
			return true
		}
	}
	return false
}

// ready returns the checks that prepare did not refuse: those that go to
// the store.
func ready(checks []*check) []*check {
	return only(checks, func(c *check) bool { return c.res.err == nil })
}

// only returns the checks keep keeps, allocating only when it drops some.
func only(checks []*check, keep func(*check) bool) []*check {
	n := 0
	for _, c := range checks {
		if keep(c) {
			n++
		}
	}
	if n == len(checks) {
		return checks
	}
	out := make([]*check, 0, n)
	for _, c := range checks {
		if keep(c) {
			out = append(out, c)
		}
	}
	return out
}

// verdict makes res the result of the call from its enforcing checks: the
// refusal of the first fail-closed rule, else one denial naming every
// denying limit whose trailers describe the one with the longest wait,
// else the first other refusal; when admitted, the decision with the
// fewest units left.
func verdict(enforcing []*check, res *result) {
	switch len(enforcing) {
	case 0:
		*res = result{}
		return
	case 1:
		*res = enforcing[0].res
		return
	}
	*res = verdictOf(enforcing).res
	if res.err == nil || res.outcome == outcomeFailClosed {
		return
	}
	shape, maxWait, denied := true, time.Duration(math.MaxInt64), false
	for _, c := range enforcing {
		if c.denied() {
			denied = true
			shape = shape && c.res.shape
			maxWait = min(maxWait, c.res.maxShapeWait)
		}
	}
	if denied {
		res.err, res.shape, res.maxShapeWait = denial(enforcing), shape, maxWait
	}
}

// verdictOf returns the check whose result the call's is, as verdict says.
func verdictOf(enforcing []*check) *check {
	if !refusedAny(enforcing) {
		var best *check
		for _, c := range enforcing {
			if c.res.hasDecision() && (best == nil || c.res.decision.Remaining < best.res.decision.Remaining) {
				best = c
			}
		}
		if best == nil {
			return enforcing[0]
		}
		return best
	}
	for _, c := range enforcing {
		if c.res.outcome == outcomeFailClosed {
			return c
		}
	}
	var longest *check
	for _, c := range enforcing {
		if c.denied() && (longest == nil || c.res.decision.RetryAfter > longest.res.decision.RetryAfter) {
			longest = c
		}
	}
	if longest != nil {
		return longest
	}
	for _, c := range enforcing {
		if c.res.err != nil && c.res.err != errSkipped {
			return c
		}
	}
	return enforcing[0]
}

// requestID is a call's request id (empty for none), or the error that
// makes it unusable.
type requestID struct {
	id  string
	err error
}

// requestID reads the call's request id from the Limiter's request id
// header (Config.RequestIDHeader). The id must be a valid
// tollgate.Request.RequestID; a client may send the header several times
// only with one value: differing values are malformed rather than resolved
// by picking one, since a proxy that appends its own id would otherwise
// silently decide which attempts share a debit.
func (l *Limiter) requestID(h keyfunc.Header) requestID {
	vals, err := l.requestIDs(h)
	if err != nil || len(vals) == 0 {
		return requestID{err: err}
	}
	id := vals[0]
	for _, v := range vals[1:] {
		if v != id {
			return requestID{err: fmt.Errorf("malformed request id: header %q has %d different values", l.header, len(vals))}
		}
	}
	if err := argcheck.RequestID(id); err != nil {
		return requestID{err: fmt.Errorf("malformed request id: header %q: %w", l.header, err)}
	}
	return requestID{id: id}
}
