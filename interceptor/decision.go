package interceptor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/idempotency"
	"github.com/tollgate/tollgate/internal/breaker"
	"github.com/tollgate/tollgate/keyfunc"
)

// replayMargin is added to a call's time left when it sets how long the
// store remembers the call's request id: a retry of the call arrives within
// the call's deadline, give or take the clocks and the network.
const replayMargin = 500 * time.Millisecond

// check is one rule's part in a decision: its span, the requests it asks of
// the store (one per limit) and what became of it.
//
// A call's checks are decided together. The enforcing checks go to the
// store as one set, all or nothing: Store.Allow for a single request (the
// common case, which keeps the store's fast paths), Store.AllowAll for more.
// Shadow checks are a second set, decided only when the first admitted the
// call, so that a shadow denial never blocks or undoes an enforcing debit
// and only calls that would otherwise go on are counted against a rule on
// trial.
type check struct {
	p    *plan
	ctx  context.Context // carries the check's span
	span trace.Span
	res  result
	// limits, requests() and decisions() are parallel: one request per
	// limit. A single request and its decision are kept in oneReq and
	// oneDec, inline, so that the common case allocates nothing (a slice
	// into the check itself would move the check to the heap); reqs and
	// decs hold more.
	limits []limitPlan
	nreq   int
	oneReq [1]tollgate.Request
	oneDec [1]tollgate.Decision
	reqs   []tollgate.Request
	decs   []tollgate.Decision
	// denying has bit i set when decs[i] is one that denied the set.
	denying uint64
	// active: the check's requests are in the store call being made. The
	// calls' sets are marked, not copied, so that a check on the stack
	// stays there.
	active bool
}

// errSkipped is the result of a check whose own limits would have admitted
// the call that another rule refused: nothing was debited. It never reaches
// the client.
var errSkipped = errors.New("another rule refused the call; this rule debited nothing")

// decide decides a call (or one stream message) to method under plans and
// returns what the call gets: its error (nil admits it) and the decision its
// trailers describe. req is the unary request or nil.
func (l *Limiter) decide(ctx context.Context, plans []*plan, method string, req any) result {
	if len(plans) == 1 {
		// One rule, the common case: its check lives on the stack.
		var c check
		c.p = plans[0]
		set := [1]*check{&c}
		return l.decideChecks(ctx, set[:], method, req)
	}
	checks := make([]check, len(plans))
	set := make([]*check, 0, len(plans))
	// Enforcing checks first, then shadow ones, each in rule order.
	for _, shadow := range [2]bool{false, true} {
		for i, p := range plans {
			if p.rule.Shadow == shadow {
				checks[i].p = p
				set = append(set, &checks[i])
			}
		}
	}
	return l.decideChecks(ctx, set, method, req)
}

// decideChecks decides set, whose enforcing checks come first.
func (l *Limiter) decideChecks(ctx context.Context, set []*check, method string, req any) result {
	refused := false
	n := len(set) // enforcing checks
	for i, c := range set {
		c.ctx, c.span = l.tel.start(ctx, c.p)
		if !l.prepare(c, method, req) && !c.p.rule.Shadow {
			refused = true
		}
		if n == len(set) && c.p.rule.Shadow {
			n = i
		}
	}
	enforcing, shadows := set[:n], set[n:]
	if !refused && len(enforcing) > 0 {
		l.run(ctx, enforcing)
		refused = refusedAny(enforcing)
	}
	if !refused && len(shadows) > 0 {
		l.run(ctx, shadows)
	}
	if refused {
		for _, c := range set {
			if c.res.err == nil {
				c.res.skip()
			}
		}
	}
	res := verdict(enforcing)
	for _, c := range shadows {
		c.res.shadowed(refused)
	}
	for _, c := range set {
		l.recordDecision(c.ctx, c.span, c.p, &c.res)
		c.span.End()
	}
	return res
}

func refusedAny(set []*check) bool {
	for _, c := range set {
		if c.res.err != nil {
			return true
		}
	}
	return false
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

// requests returns c's requests, one per limit.
func (c *check) requests() []tollgate.Request {
	if c.reqs != nil {
		return c.reqs
	}
	return c.oneReq[:c.nreq]
}

// decisions returns the store's decisions on c's requests, in order.
func (c *check) decisions() []tollgate.Decision {
	if c.decs != nil {
		return c.decs
	}
	return c.oneDec[:c.nreq]
}

// denied reports whether some of c's limits denied its set.
func (c *check) denied() bool { return c.denying != 0 }

// prepare finds the check's identity, limits and cost and builds its
// requests, or fills its result with the refusal.
func (l *Limiter) prepare(c *check, method string, req any) bool {
	p, res := c.p, &c.res
	key, value, ok := identity(c.ctx, p, method, res)
	if !ok {
		return false
	}
	var requestID string
	if p.priced {
		id, err := idempotency.FromIncoming(c.ctx, l.header)
		if err != nil {
			res.reject(outcomeInvalid, codes.InvalidArgument, err, "rate limit %q: %v", p.rule.Name, err)
			return false
		}
		requestID = id
	}
	if !limitsFor(c, value) {
		return false
	}
	cost, ok := costFor(c.ctx, p, method, req, c.limits, res)
	if !ok {
		return false
	}
	res.cost = cost
	c.nreq = len(c.limits)
	if c.nreq > 1 {
		c.reqs = make([]tollgate.Request, c.nreq)
	}
	reqs := c.requests()
	for i, lp := range c.limits {
		k := lp.key(key)
		if len(k) > tollgate.MaxKeyLen {
			res.reject(outcomeInvalid, codes.InvalidArgument, nil, "rate limit %q: the caller's identity is %d bytes, more than %d", p.rule.Name, len(value), tollgate.MaxKeyLen-len(k)+len(value))
			return false
		}
		reqs[i] = tollgate.Request{Key: k, Limit: lp.limit, Cost: cost, RequestID: requestID}
	}
	return true
}

// run asks the store to decide the checks of set that are ready (not
// refused already), all or nothing, and fills their results; when the store
// cannot decide, each rule's FailMode applies.
func (l *Limiter) run(ctx context.Context, set []*check) {
	ready := false
	for _, c := range set {
		c.active = c.res.err == nil
		ready = ready || c.active
	}
	if !ready {
		return
	}
	allowed, probe := l.breaker.Allow()
	if !allowed {
		l.failSet(ctx, set, errBreakerOpen)
		return
	}
	// One clock reading is both the start of the store's latency and the
	// base of its deadline: a call that times out records at least the
	// timeout, and the decision reads the clock once instead of twice.
	start := time.Now()
	if deadline, ok := ctx.Deadline(); ok {
		// The call's own deadline, before the store's shorter one wraps it.
		setReplayTTL(set, max(deadline.Sub(start), 0)+replayMargin)
	}
	sctx, cancel := ctx, context.CancelFunc(nil)
	if l.storeBlocks {
		sctx, cancel = context.WithDeadline(ctx, start.Add(l.storeTimeout))
	}
	err := ask(sctx, l.store, set)
	elapsed := time.Since(start)
	if cancel != nil {
		cancel()
	}
	switch {
	case err == nil:
		l.breaker.Done(probe, breaker.OK)
		for _, c := range set {
			if c.active {
				l.recordStore(ctx, c.p, elapsed, false)
			}
		}
		settle(set)
	case errors.Is(err, tollgate.ErrInvalidRequest):
		// A configuration the checks above let through; the store is fine.
		l.breaker.Done(probe, breaker.NoNews)
		for _, c := range set {
			if !c.active {
				continue
			}
			c.res.reject(outcomeInvalid, codes.Internal, err, "rate limit %q: the limiter is misconfigured: %v", c.p.rule.Name, err)
		}
	case ctx.Err() != nil:
		// The caller cancelled or ran out of time, not the store.
		l.breaker.Done(probe, breaker.NoNews)
		for _, c := range set {
			if !c.active {
				continue
			}
			c.res.outcome, c.res.cause = outcomeCanceled, ctx.Err()
			c.res.err = status.FromContextError(ctx.Err()).Err()
		}
	default:
		l.breaker.Done(probe, breaker.Failed)
		for _, c := range set {
			if c.active {
				l.recordStore(ctx, c.p, elapsed, true)
			}
		}
		l.failSet(ctx, set, err)
	}
}

// setReplayTTL bounds how long the store remembers the request ids of set.
func setReplayTTL(set []*check, ttl time.Duration) {
	for _, c := range set {
		if !c.active {
			continue
		}
		reqs := c.requests()
		for i := range reqs {
			if reqs[i].RequestID != "" {
				reqs[i].ReplayTTL = ttl
			}
		}
	}
}

// ask sends the requests of the active checks of set to st, with Allow for
// a single request and AllowAll for more, and gives each check its
// decisions.
func ask(ctx context.Context, st tollgate.Store, set []*check) error {
	var one *check
	n := 0
	for _, c := range set {
		if c.active {
			one, n = c, n+c.nreq
		}
	}
	if n == 1 {
		c := one
		dec, err := st.Allow(ctx, c.oneReq[0])
		c.oneDec[0] = dec
		return err
	}
	reqs := one.reqs // one check's several limits: its requests as they are
	if n != one.nreq {
		reqs = make([]tollgate.Request, 0, n)
		for _, c := range set {
			if c.active {
				reqs = append(reqs, c.requests()...)
			}
		}
	}
	decs, err := st.AllowAll(ctx, reqs)
	if err != nil {
		return err
	}
	if len(decs) != len(reqs) {
		return fmt.Errorf("interceptor: the store answered %d decisions for %d requests", len(decs), len(reqs))
	}
	for _, c := range set {
		if c.active {
			if c.nreq == 1 {
				c.oneDec[0] = decs[0]
			} else {
				c.decs = decs[:c.nreq:c.nreq]
			}
			decs = decs[c.nreq:]
		}
	}
	return nil
}

// settle fills the result of every check of set from its decisions. When
// the set was denied, the denying decisions are those with a wait (AllowAll
// gives RetryAfter 0 to those that would have been admitted), or every
// denied one when none has a wait.
func settle(set []*check) {
	admitted, waits := true, false
	for _, c := range set {
		if !c.active {
			continue
		}
		for _, d := range c.decisions() {
			admitted = admitted && d.Allowed
			waits = waits || (!d.Allowed && d.RetryAfter > 0)
		}
	}
	for _, c := range set {
		if !c.active {
			continue
		}
		c.denying = 0
		if !admitted {
			for i, d := range c.decisions() {
				if !d.Allowed && (d.RetryAfter > 0 || !waits) {
					c.denying |= 1 << i
				}
			}
		}
		c.res.decided(c)
	}
}

// decided fills res with c's decisions: the most restrictive one (the
// denying one with the longest wait, else the one with the fewest units
// left) is the one its trailers and span describe.
func (res *result) decided(c *check) {
	best := -1
	decs := c.decisions()
	for i, d := range decs {
		switch {
		case best < 0:
			best = i
		case c.denying != 0:
			if c.denying&(1<<i) != 0 && (c.denying&(1<<best) == 0 || d.RetryAfter > decs[best].RetryAfter) {
				best = i
			}
		case d.Remaining < decs[best].Remaining:
			best = i
		}
	}
	dec := decs[best]
	res.decision, res.limit, res.limitHeader = dec, c.limits[best].limit, c.limits[best].header
	switch {
	case c.denying != 0:
		res.outcome = outcomeDenied
		res.shape, res.maxShapeWait = c.p.rule.StreamMode == Shape, c.p.rule.maxShapeWait
		res.err = denial([]*check{c})
	case !dec.Allowed:
		res.skip()
	case dec.Replayed:
		res.outcome = outcomeReplayed
	default:
		res.outcome = outcomeAllowed
	}
}

// skip marks a check whose limits admitted a call another rule refused.
func (res *result) skip() {
	res.outcome, res.err = outcomeSkipped, errSkipped
}

// shadowed turns a shadow check's refusal into a record. When an enforcing
// rule refused the call, the check keeps its result (the call did not go
// on); otherwise the call goes on whatever the check decided.
func (res *result) shadowed(refused bool) {
	if refused {
		return
	}
	if res.outcome == outcomeDenied {
		// A denial is the limiter working, not an error: the span says it
		// with the outcome, as for an enforced denial.
		res.outcome = outcomeShadowDenied
	}
	res.err = nil
}

// failSet applies each rule's FailMode to the active checks of set after
// the store failed with cause. A fail-closed rule refuses the call, and then
// no local decision is made; otherwise the fail-local rules decide together,
// all or nothing, on the local store under their local caps, and fail-open
// rules admit.
func (l *Limiter) failSet(ctx context.Context, set []*check, cause error) {
	closed, local := false, false
	for _, c := range set {
		if !c.active {
			continue
		}
		c.res.storeFailed, c.res.cause = true, cause
		switch c.p.rule.FailMode {
		case FailOpen:
			c.res.outcome, c.active = outcomeFailOpen, false
		case FailClosed:
			c.res.failClosed(c.p.rule.Name)
			closed, c.active = true, false
		case FailLocal:
			local = true
		}
	}
	if !local {
		return
	}
	for _, c := range set {
		if !c.active {
			continue
		}
		// The local caps replace the limits; a check's limits may be its
		// plan's, so they are copied, not changed.
		limits := make([]limitPlan, len(c.limits))
		reqs := c.requests()
		for i, lp := range c.limits {
			limits[i] = limitPlan{limit: lp.local, header: strconv.FormatInt(lp.local.Capacity(), 10)}
			reqs[i].Limit = lp.local
			if reqs[i].Cost > lp.local.Capacity() {
				// No local decision could ever admit it: refuse it as
				// FailClosed does.
				c.res.failClosed(c.p.rule.Name)
				closed = true
			}
		}
		c.limits = limits
	}
	if closed {
		for _, c := range set {
			if c.active && c.res.err == nil {
				c.res.skip()
			}
		}
		return
	}
	if err := ask(ctx, l.local, set); err != nil {
		for _, c := range set {
			if c.active {
				c.res.cause = errors.Join(cause, err)
				c.res.failClosed(c.p.rule.Name)
			}
		}
		return
	}
	settle(set)
	for _, c := range set {
		if c.active && c.res.outcome != outcomeSkipped {
			c.res.outcome = outcomeFailLocal
		}
	}
}

// failClosed fills res with the refusal of a rule whose store cannot decide.
func (res *result) failClosed(rule string) {
	res.outcome = outcomeFailClosed
	res.err = status.Errorf(codes.Unavailable, "rate limit %q: rate limiter unavailable: its store cannot decide", rule)
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

// limitsFor sets c.limits for the identity value (the key function's
// result), or fills c's result with the rejection.
func limitsFor(c *check, value string) bool {
	p, res := c.p, &c.res
	switch {
	case p.limitFunc != nil:
		limit, err := p.limitFunc(c.ctx, value)
		if err != nil {
			res.fail(outcomeError, err, "rate limit %q: LimitFunc failed: %v", p.rule.Name, err)
			return false
		}
		if err := limit.Validate(); err != nil {
			res.reject(outcomeInvalid, codes.Internal, err, "rate limit %q: LimitFunc returned an invalid limit: %v", p.rule.Name, err)
			return false
		}
		c.limits = []limitPlan{p.newLimitPlan(limit)}
	case p.limitsFunc != nil:
		limits, err := p.limitsFunc(c.ctx, value)
		if err != nil {
			res.fail(outcomeError, err, "rate limit %q: LimitsFunc failed: %v", p.rule.Name, err)
			return false
		}
		if len(limits) == 0 || len(limits) > tollgate.MaxAllowAll {
			res.reject(outcomeInvalid, codes.Internal, nil, "rate limit %q: LimitsFunc returned %d limits, want 1 to %d", p.rule.Name, len(limits), tollgate.MaxAllowAll)
			return false
		}
		for i, limit := range limits {
			if err := limit.Validate(); err != nil {
				res.reject(outcomeInvalid, codes.Internal, err, "rate limit %q: LimitsFunc returned an invalid limit %d: %v", p.rule.Name, i, err)
				return false
			}
		}
		if err := distinctLimits(limits); err != nil {
			res.reject(outcomeInvalid, codes.Internal, err, "rate limit %q: LimitsFunc: %v", p.rule.Name, err)
			return false
		}
		c.limits = make([]limitPlan, len(limits))
		for i, limit := range limits {
			c.limits[i] = p.newLimitPlan(limit)
		}
	default:
		c.limits = p.limits
	}
	return true
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
