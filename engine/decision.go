package engine

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate"
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
// what the call gets: its error (nil admits it) and the decision its
// trailers describe. call.Stream says the call is a stream's opening.
// When out is not nil, the state of every enforcing limit is collected
// in it (see LimitDecision).
//
// When the call is admitted, after is what its rules are owed once it ends
// (settlements, seats to release), or nil.
func (l *Limiter) decide(ctx context.Context, set *planSet, call Call, out *limitList) (res result, after *afterCall) {
	if len(set.plans) == 1 {
		// One rule, the common case: its check comes from a pool, as a
		// check on the stack would escape (its requests point into it).
		c := checks.Get().(*check)
		c.p = set.plans[0]
		one := [1]*check{c}
		res = l.decideChecks(ctx, one[:], set.enforcing, call)
		if out != nil {
			l.collectLimits(ctx, out, one[:set.enforcing], res)
		}
		if set.owes {
			after = l.owed(ctx, one[:], res)
		}
		*c = check{}
		checks.Put(c)
		return res, after
	}
	all := make([]check, len(set.plans))
	ptrs := make([]*check, len(set.plans))
	for i, p := range set.plans {
		all[i].p = p
		ptrs[i] = &all[i]
	}
	res = l.decideChecks(ctx, ptrs, set.enforcing, call)
	if out != nil {
		l.collectLimits(ctx, out, ptrs[:set.enforcing], res)
	}
	if set.owes {
		after = l.owed(ctx, ptrs, res)
	}
	return res, after
}

// checks recycles the check of single-rule decisions (BenchmarkUnaryAdmit).
var checks = sync.Pool{New: func() any { return new(check) }}

// decideChecks decides checks, of which the first n are enforcing and the
// rest shadow.
func (l *Limiter) decideChecks(ctx context.Context, checks []*check, n int, call Call) result {
	enforcing, shadows := checks[:n], checks[n:]
	var id requestID
	if checks[0].p.priced { // every check of a set has one scope
		id = l.requestID(call.Header)
	}
	for _, c := range checks {
		c.ctx, c.span = l.tel.start(ctx, c.p)
		l.prepare(c, call, id)
	}
	refused := refusedAny(enforcing)
	if !refused {
		owedBefore := l.sender.owes(enforcing, false)
		l.run(ctx, ready(enforcing))
		refused = refusedAny(enforcing)
		if refused && l.ownWorkOwed(ctx, enforcing, owedBefore) {
			// Denied while this replica still owed the store a
			// settlement or a release on the same keys: asked again
			// now that it was delivered.
			for _, c := range enforcing {
				c.retry()
			}
			l.run(ctx, enforcing)
			refused = refusedAny(enforcing)
		}
	}
	if !refused {
		l.run(ctx, ready(shadows))
	}
	if refused {
		for _, c := range checks {
			if c.res.err == nil {
				c.res.skip()
			}
		}
	}
	res := verdict(enforcing)
	for _, c := range shadows {
		c.res.shadowed(refused)
	}
	for _, c := range checks {
		l.recordDecision(c.ctx, c.span, c.p, &c.res)
		c.span.End()
	}
	return res
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

// verdict is the result of the call from its enforcing checks: the refusal
// of the first fail-closed rule, else one denial naming every denying limit
// whose trailers describe the one with the longest wait, else the first
// other refusal; when admitted, the decision with the fewest units left.
func verdict(enforcing []*check) result {
	switch len(enforcing) {
	case 0:
		return result{}
	case 1:
		return enforcing[0].res
	}
	if !refusedAny(enforcing) {
		var best *check
		for _, c := range enforcing {
			if c.res.hasDecision() && (best == nil || c.res.decision.Remaining < best.res.decision.Remaining) {
				best = c
			}
		}
		if best == nil {
			return enforcing[0].res
		}
		return best.res
	}
	for _, c := range enforcing {
		if c.res.outcome == outcomeFailClosed {
			return c.res
		}
	}
	var longest *check
	shape, maxWait := true, time.Duration(math.MaxInt64)
	for _, c := range enforcing {
		if !c.denied() {
			continue
		}
		if longest == nil || c.res.decision.RetryAfter > longest.res.decision.RetryAfter {
			longest = c
		}
		shape = shape && c.res.shape
		maxWait = min(maxWait, c.res.maxShapeWait)
	}
	if longest != nil {
		res := longest.res
		res.err, res.shape, res.maxShapeWait = denial(enforcing), shape, maxWait
		return res
	}
	for _, c := range enforcing {
		if c.res.err != nil && c.res.err != errSkipped {
			return c.res
		}
	}
	return enforcing[0].res
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
