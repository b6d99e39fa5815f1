package interceptor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/idempotency"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// Limiter applies rules to gRPC calls. It is safe for concurrent use; make
// one per server with New and install its interceptors.
type Limiter struct {
	store        tollgate.Store
	local        tollgate.Store // FailLocal's in-process store; nil when no rule uses it
	rules        []*rule
	matcher      matcher
	header       string
	storeTimeout time.Duration
	replicas     int64
	breaker      *breaker
	tel          telemetry
}

// New returns a Limiter that asks st for decisions. Every problem with the
// configuration is reported here, naming the rule, so that nothing is
// rejected at request time that could have been rejected at start-up: a
// missing store or rule, an empty or duplicate name, a malformed method
// pattern, a rule no method can reach, a missing Key function, an invalid
// Limit, a Cost above the limit's capacity, an unknown mode.
func New(st tollgate.Store, opts ...Option) (*Limiter, error) {
	c := defaultConfig()
	for _, o := range opts {
		o(&c)
	}
	switch {
	case st == nil:
		return nil, errors.New("interceptor: the store is nil")
	case len(c.rules) == 0:
		return nil, errors.New("interceptor: no rules: give at least one with WithRules")
	case c.storeTimeout <= 0:
		return nil, fmt.Errorf("interceptor: store timeout must be > 0, got %s", c.storeTimeout)
	case c.breakerFailures < 0:
		return nil, fmt.Errorf("interceptor: breaker failures must be >= 0, got %d", c.breakerFailures)
	case c.breakerFailures > 0 && c.breakerCoolDown <= 0:
		return nil, fmt.Errorf("interceptor: breaker cool-down must be > 0, got %s", c.breakerCoolDown)
	case c.replicas < 1:
		return nil, fmt.Errorf("interceptor: replicas must be >= 1, got %d", c.replicas)
	}
	if err := validateHeader(c.requestIDHeader); err != nil {
		return nil, err
	}
	tel, err := newTelemetry(c.tracerProvider, c.meterProvider)
	if err != nil {
		return nil, fmt.Errorf("interceptor: creating metrics: %w", err)
	}
	l := &Limiter{
		store:        st,
		header:       c.requestIDHeader,
		storeTimeout: c.storeTimeout,
		replicas:     c.replicas,
		breaker:      newBreaker(c.breakerFailures, c.breakerCoolDown),
		tel:          tel,
	}
	names := make(map[string]bool, len(c.rules))
	for i, r := range c.rules {
		cr, err := compileRule(r, i, c.replicas)
		if err != nil {
			return nil, fmt.Errorf("interceptor: %w", err)
		}
		// The same policy for every key function: an empty value is
		// missing, an oversized one invalid.
		cr.Key = keyfunc.Checked(r.Key)
		if names[r.Name] {
			return nil, fmt.Errorf("interceptor: rule %q: the name is used by an earlier rule: names keep the rules' buckets apart", r.Name)
		}
		names[r.Name] = true
		l.rules = append(l.rules, cr)
		if r.FailMode == FailLocal && l.local == nil {
			l.local = c.local
			if l.local == nil {
				l.local = store.NewMemory()
			}
		}
	}
	if l.matcher, err = newMatcher(l.rules); err != nil {
		return nil, fmt.Errorf("interceptor: %w", err)
	}
	return l, nil
}

// validateHeader accepts what gRPC accepts as a metadata key that is not
// binary and not reserved.
func validateHeader(h string) error {
	if h == "" {
		return errors.New("interceptor: the request id header is empty")
	}
	if strings.HasPrefix(h, "grpc-") || strings.HasSuffix(h, "-bin") {
		return fmt.Errorf("interceptor: request id header %q is reserved by gRPC or binary", h)
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("interceptor: request id header %q: metadata keys are lower-case letters, digits, '-', '_' and '.'", h)
		}
	}
	return nil
}

// result is one decision, before it is translated for gRPC.
type result struct {
	outcome  outcome
	decision tollgate.Decision
	// limit and cost are what was asked of the store (the local cap under
	// FailLocal); limit is zero when no store was asked.
	limit tollgate.Limit
	cost  int64
	// limitHeader is x-ratelimit-limit for limit.
	limitHeader string
	// storeFailed reports that the rule's FailMode applied.
	storeFailed bool
	// err is the status returned to the client; nil admits the call.
	err error
	// cause is recorded on the span as an error.
	cause error
}

func (res *result) allowed() bool { return res.err == nil }

// hasDecision reports whether a store decided, so that there is something
// to say in trailers.
func (res *result) hasDecision() bool {
	switch res.outcome {
	case outcomeAllowed, outcomeDenied, outcomeReplayed, outcomeFailLocal:
		return res.limit.Rate > 0
	}
	return false
}

// errBreakerOpen is recorded on spans of calls the breaker kept from the
// store.
var errBreakerOpen = errors.New("circuit breaker open: the store failed repeatedly and is not asked until the cool-down passes")

// decide makes one decision under plan p for a call to method, in its own
// span; req is the unary request or nil.
func (l *Limiter) decide(ctx context.Context, p *plan, method string, req any) result {
	ctx, span := l.tel.tracer.Start(ctx, p.tel.spanName, p.tel.spanStart...)
	var res result
	l.decideIn(ctx, p, method, req, &res)
	l.recordDecision(ctx, span, p, &res)
	span.End()
	return res
}

func (l *Limiter) decideIn(ctx context.Context, p *plan, method string, req any, res *result) {
	key, value, ok := identity(ctx, p, method, res)
	if !ok {
		return
	}
	var requestID string
	if p.priced {
		id, err := idempotency.FromIncoming(ctx, l.header)
		if err != nil {
			res.reject(outcomeInvalid, codes.InvalidArgument, err, "rate limit %q: %v", p.rule.Name, err)
			return
		}
		requestID = id
	}
	lp, ok := limitFor(ctx, p, value, res)
	if !ok {
		return
	}
	cost, ok := costFor(ctx, p, method, req, lp.limit, res)
	if !ok {
		return
	}
	sreq := tollgate.Request{Key: key, Limit: lp.limit, Cost: cost, RequestID: requestID}
	res.cost = cost

	allowed, probe := l.breaker.allow()
	if !allowed {
		l.failPolicy(ctx, p, lp, sreq, errBreakerOpen, res)
		return
	}
	// One clock reading is both the start of the store's latency and the
	// base of its deadline: a call that times out records at least the
	// timeout, and the decision reads the clock once instead of twice.
	start := time.Now()
	sctx, cancel := context.WithDeadline(ctx, start.Add(l.storeTimeout))
	dec, err := l.store.Allow(sctx, sreq)
	elapsed := time.Since(start)
	cancel()
	switch {
	case err == nil:
		l.breaker.done(probe, storeOK)
		l.recordStore(ctx, p, elapsed, false)
		res.decided(p.rule, dec, lp.limit, lp.header)
	case errors.Is(err, tollgate.ErrInvalidRequest):
		// A configuration the checks above let through; the store is fine.
		l.breaker.done(probe, storeNoNews)
		res.reject(outcomeInvalid, codes.Internal, err, "rate limit %q: the limiter is misconfigured: %v", p.rule.Name, err)
	case ctx.Err() != nil:
		// The caller cancelled or ran out of time, not the store.
		l.breaker.done(probe, storeNoNews)
		res.outcome, res.cause = outcomeCanceled, ctx.Err()
		res.err = status.FromContextError(ctx.Err()).Err()
	default:
		l.breaker.done(probe, storeFailed)
		l.recordStore(ctx, p, elapsed, true)
		l.failPolicy(ctx, p, lp, sreq, err, res)
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
	key = p.key(value, anonymous)
	if len(key) > tollgate.MaxKeyLen {
		res.reject(outcomeInvalid, codes.InvalidArgument, nil, "rate limit %q: the caller's identity is %d bytes, more than %d", r.Name, len(value), tollgate.MaxKeyLen)
		return "", "", false
	}
	return key, value, true
}

// limitFor returns the limit enforced on the identity value (the key
// function's result), or fills res with the rejection.
func limitFor(ctx context.Context, p *plan, value string, res *result) (limitPlan, bool) {
	if p.limitFunc == nil {
		return p.limits[0], true
	}
	limit, err := p.limitFunc(ctx, value)
	if err != nil {
		res.fail(outcomeError, err, "rate limit %q: LimitFunc failed: %v", p.rule.Name, err)
		return limitPlan{}, false
	}
	if err := limit.Validate(); err != nil {
		res.reject(outcomeInvalid, codes.Internal, err, "rate limit %q: LimitFunc returned an invalid limit: %v", p.rule.Name, err)
		return limitPlan{}, false
	}
	return p.newLimitPlan(limit), true
}

// costFor returns the cost of the call, or fills res with the rejection.
func costFor(ctx context.Context, p *plan, method string, req any, limit tollgate.Limit, res *result) (int64, bool) {
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
	if capacity := limit.Capacity(); cost > capacity {
		if fromFunc {
			res.reject(outcomeInvalid, codes.InvalidArgument, nil, "rate limit %q: the request costs %d, more than the %d it can ever admit at once (%s)", r.Name, cost, capacity, limit)
		} else {
			res.reject(outcomeInvalid, codes.Internal, nil, "rate limit %q: cost %d exceeds the capacity %d of %s returned by LimitFunc", r.Name, cost, capacity, limit)
		}
		return 0, false
	}
	return cost, true
}

// failPolicy fills res according to the rule's FailMode after the store
// failed with cause.
func (l *Limiter) failPolicy(ctx context.Context, p *plan, lp limitPlan, sreq tollgate.Request, cause error, res *result) {
	res.storeFailed, res.cause = true, cause
	switch p.rule.FailMode {
	case FailOpen:
		res.outcome = outcomeFailOpen
		return
	case FailLocal:
		sreq.Limit = lp.local
		dec, err := l.local.Allow(ctx, sreq)
		if err == nil {
			res.decided(p.rule, dec, lp.local, strconv.FormatInt(lp.local.Capacity(), 10))
			res.outcome = outcomeFailLocal
			return
		}
		// Only a cost above the local cap gets here: no local decision
		// could ever admit it, so refuse it as FailClosed does.
		res.cause = errors.Join(cause, err)
	}
	res.outcome = outcomeFailClosed
	res.err = status.Errorf(codes.Unavailable, "rate limit %q: rate limiter unavailable: its store cannot decide", p.rule.Name)
}

// reject fills res with a refusal of the given code. cause, when not nil,
// is recorded on the span; otherwise the message is.
func (res *result) reject(o outcome, code codes.Code, cause error, format string, args ...any) {
	st := status.Newf(code, format, args...)
	res.outcome, res.err = o, st.Err()
	res.cause = cause
	if cause == nil {
		res.cause = res.err
	}
}

// fail fills res after a function of the rule failed with err: a gRPC
// status from it is passed to the client as it is, anything else becomes
// codes.Internal.
func (res *result) fail(o outcome, err error, format string, args ...any) {
	if st, ok := status.FromError(err); ok {
		res.outcome, res.err, res.cause = o, st.Err(), err
		return
	}
	res.reject(o, codes.Internal, err, format, args...)
}
