package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/breaker"
)

// Request bounds. A request beyond them is refused with
// codes.InvalidArgument before anything is matched or stored.
const (
	// MaxDescriptors is the most descriptors one request may carry.
	MaxDescriptors = 256
	// MaxEntries is the most entries one descriptor may have.
	MaxEntries = 64
)

// Server answers Envoy's ShouldRateLimit from a tollgate.Store. It is safe
// for concurrent use; SetConfig swaps the configuration while calls run.
type Server struct {
	pb.UnimplementedRateLimitServiceServer

	store   tollgate.Store
	config  atomic.Pointer[Config]
	opts    options
	breaker *breaker.Breaker
	tel     *telemetry
}

var _ pb.RateLimitServiceServer = (*Server)(nil)

// NewServer returns a Server deciding with st. An invalid option is an
// error here.
func NewServer(st tollgate.Store, opts ...Option) (*Server, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case st == nil:
		return nil, errors.New("rls: the store is nil")
	case o.failMode > FailOpen:
		return nil, fmt.Errorf("rls: unknown fail mode %d", o.failMode)
	case o.storeTimeout <= 0:
		return nil, fmt.Errorf("rls: store timeout must be > 0, got %s", o.storeTimeout)
	case o.breakerFailures < 0 || (o.breakerFailures > 0 && o.breakerCoolDown <= 0):
		return nil, fmt.Errorf("rls: breaker needs failures >= 0 and, when enabled, a cool-down > 0; got %d and %s", o.breakerFailures, o.breakerCoolDown)
	}
	for _, name := range o.headerNames {
		if err := validHeaderName(name); err != nil {
			return nil, err
		}
	}
	tel, err := newTelemetry(o.tracerProvider, o.meterProvider)
	if err != nil {
		return nil, fmt.Errorf("rls: telemetry: %w", err)
	}
	s := &Server{
		store:   st,
		opts:    o,
		breaker: breaker.New(o.breakerFailures, o.breakerCoolDown),
		tel:     tel,
	}
	if o.config == nil {
		o.config = &Config{}
	}
	s.config.Store(o.config)
	return s, nil
}

func validHeaderName(name string) error {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || c == ':' {
			return fmt.Errorf("rls: header name %q: only printable ASCII without spaces or ':'", name)
		}
	}
	return nil
}

// SetConfig replaces the configuration. Calls in flight finish with the
// configuration they started with; no call is dropped. Limits whose
// descriptors keep their keys keep their state.
func (s *Server) SetConfig(c *Config) {
	if c == nil {
		c = &Config{}
	}
	s.config.Store(c)
}

// Config returns the configuration in use.
func (s *Server) Config() *Config { return s.config.Load() }

// kind is what the server does with one request descriptor.
type kind uint8

const (
	kindNone      kind = iota // no limit applies: OK
	kindUnlimited             // unlimited: OK, remaining MaxUint32
	kindEnforced              // decided in the request's one AllowAll
	kindShadow                // decided alone; never refuses the request
	kindPeek                  // hits_addend 0: looked at, not debited
	kindDenied                // can never be admitted (limit 0, or cost above capacity)
)

// slot is one request descriptor's plan and answer.
type slot struct {
	kind   kind
	rule   *rule
	req    tollgate.Request
	metric string // the rule's name in metrics
	dec    tollgate.Decision
	// decided: dec holds the store's answer.
	decided bool
	outcome outcome
}

// ShouldRateLimit decides every descriptor of req. Limited descriptors that
// are not in shadow mode are decided all or nothing with one
// Store.AllowAll: a request refused by one of them debits none of the
// others. An unknown domain or a descriptor no limit matches is OK. A
// malformed or oversized request is codes.InvalidArgument; a store that
// cannot decide gives the fail mode's answer.
func (s *Server) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	ctx, span := s.tel.tracer.Start(ctx, "ratelimit", s.tel.spanStart...)
	defer span.End()
	resp, overall, err := s.shouldRateLimit(ctx, span, req)
	s.tel.recordCall(span, req.GetDomain(), len(req.GetDescriptors()), overall, err)
	return resp, err
}

func (s *Server) shouldRateLimit(ctx context.Context, span trace.Span, req *pb.RateLimitRequest) (*pb.RateLimitResponse, outcome, error) {
	if err := checkRequest(req); err != nil {
		return nil, outcomeInvalid, err
	}
	descs := req.GetDescriptors()
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(descs))}
	d := s.config.Load().domains[req.GetDomain()]
	if d == nil {
		for i := range resp.Statuses {
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
		}
		return resp, outcomeAllowed, nil
	}
	// Only configured domains name spans: span names stay few.
	span.SetName("ratelimit " + d.name)
	slots, err := s.plan(d, req)
	if err != nil {
		return nil, outcomeInvalid, err
	}
	overall, err := s.decide(ctx, d.name, slots)
	if err != nil {
		s.recordSlots(ctx, slots)
		return nil, overall, err
	}
	s.recordSlots(ctx, slots)
	for i := range slots {
		resp.Statuses[i] = slots[i].status()
	}
	if overall == outcomeDenied {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	if s.opts.headers {
		resp.ResponseHeadersToAdd = s.headers(slots)
	}
	return resp, overall, nil
}

// checkRequest refuses what no configuration could make sense of.
func checkRequest(req *pb.RateLimitRequest) error {
	descs := req.GetDescriptors()
	switch {
	case req.GetDomain() == "":
		return status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	case len(descs) == 0:
		return status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	case len(descs) > MaxDescriptors:
		return status.Errorf(codes.InvalidArgument, "%d descriptors, more than %d", len(descs), MaxDescriptors)
	case len(req.GetDomain()) > tollgate.MaxKeyLen:
		return status.Errorf(codes.InvalidArgument, "domain is %d bytes, more than %d", len(req.GetDomain()), tollgate.MaxKeyLen)
	}
	for i, desc := range descs {
		switch {
		case len(desc.GetEntries()) > MaxEntries:
			return status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries, more than %d", i, len(desc.GetEntries()), MaxEntries)
		case desc.GetIsNegativeHits():
			return status.Errorf(codes.InvalidArgument, "descriptor %d: is_negative_hits is not supported: a denied request debits nothing, so there is nothing to give back", i)
		case keyLen(req.GetDomain(), desc.GetEntries()) > tollgate.MaxKeyLen:
			return status.Errorf(codes.InvalidArgument, "descriptor %d: its keys and values are more than %d bytes", i, tollgate.MaxKeyLen)
		}
	}
	return nil
}

// plan matches every descriptor and decides what to do with it.
func (s *Server) plan(d *domain, req *pb.RateLimitRequest) ([]slot, error) {
	descs := req.GetDescriptors()
	slots := make([]slot, len(descs))
	var path []*descriptor
	var replaced map[string]bool // names replaced by a matched limit; rare
	for i, desc := range descs {
		var r *rule
		if ov := desc.GetLimit(); ov != nil {
			var err error
			if r, err = overrideRule(d.name, ov); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: limit override: %v", i, err)
			}
			path = path[:0]
		} else if r, path = d.match(desc.GetEntries(), path); r == nil {
			continue
		}
		for _, name := range r.replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
		sl := &slots[i]
		sl.rule = r
		if r.unlimited {
			sl.kind = kindUnlimited
			continue
		}
		sl.req.Key = storeKey(d.name, desc.GetEntries(), path)
		if len(sl.req.Key) > tollgate.MaxKeyLen {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: its keys and values are more than %d bytes", i, tollgate.MaxKeyLen)
		}
		sl.req.Limit = r.limit
		sl.metric = metricPath(d.name, r, desc.GetEntries())
		cost := uint64(max(1, req.GetHitsAddend()))
		if h := desc.GetHitsAddend(); h != nil {
			cost = h.GetValue()
		}
		switch {
		case cost == 0:
			sl.kind = kindPeek
		case r.deny || cost > uint64(r.limit.Capacity()):
			sl.kind = kindDenied
		case r.shadow:
			sl.kind = kindShadow
		default:
			sl.kind = kindEnforced
		}
		sl.req.Cost = int64(min(cost, math.MaxInt64))
	}
	enforced, shadow := 0, 0
	for i := range slots {
		sl := &slots[i]
		// As in envoyproxy/ratelimit, an unlimited descriptor is never
		// replaced.
		if sl.kind != kindUnlimited && sl.rule != nil && sl.rule.name != "" && replaced[sl.rule.name] {
			*sl = slot{}
			continue
		}
		switch sl.kind {
		case kindEnforced:
			enforced++
		case kindShadow, kindPeek:
			shadow++
		}
	}
	if enforced > tollgate.MaxAllowAll {
		return nil, status.Errorf(codes.InvalidArgument, "%d limited descriptors, more than the %d decided at once", enforced, tollgate.MaxAllowAll)
	}
	if shadow > tollgate.MaxAllowAll {
		return nil, status.Errorf(codes.InvalidArgument, "%d shadow-mode or check-only descriptors, more than %d", shadow, tollgate.MaxAllowAll)
	}
	return slots, nil
}

// overrideRule is the rule for a descriptor carrying its own limit (Envoy's
// limit override): a fixed window, never in shadow mode, as in
// envoyproxy/ratelimit.
func overrideRule(domain string, ov *rlv3.RateLimitDescriptor_RateLimitOverride) (*rule, error) {
	u, ok := overrideUnit(ov.GetUnit())
	if !ok {
		return nil, fmt.Errorf("unknown unit %s", ov.GetUnit())
	}
	period := u.period
	if m := ov.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
		period *= time.Duration(m.GetValue())
	}
	r := &rule{
		path:    domain + ".override",
		current: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: ov.GetRequestsPerUnit(), Unit: u.response, UnitMultiplier: ov.GetUnitMultiplier()},
		limit:   tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: int64(ov.GetRequestsPerUnit()), Period: period},
	}
	if r.limit.Rate == 0 {
		r.deny = true
		return r, nil
	}
	if err := r.limit.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// errBreakerOpen is the cause recorded when the breaker kept a call from
// the store.
var errBreakerOpen = errors.New("circuit breaker open: the store failed repeatedly and is not asked until the cool-down passes")

// decide asks the store and fills the slots' decisions. It returns the
// request's outcome, or the error to answer with.
func (s *Server) decide(ctx context.Context, domain string, slots []slot) (outcome, error) {
	var reqs []tollgate.Request
	var idx []int
	doomed := false
	for i := range slots {
		switch slots[i].kind {
		case kindEnforced:
			reqs = append(reqs, slots[i].req)
			idx = append(idx, i)
		case kindDenied:
			if !slots[i].rule.shadow {
				doomed = true
			}
		}
	}
	overall := outcomeAllowed
	switch {
	case doomed:
		// One descriptor can never be admitted: nothing is debited, and
		// the store need not be asked.
		overall = outcomeDenied
		for _, i := range idx {
			slots[i].outcome = outcomeDenied
		}
	case len(reqs) > 0:
		var decs []tollgate.Decision
		err := s.callStore(ctx, domain, func(ctx context.Context) (err error) {
			decs, err = s.store.AllowAll(ctx, reqs)
			return err
		})
		if err != nil {
			o, err := s.failed(ctx, err)
			for _, i := range idx {
				slots[i].outcome = o
			}
			if err != nil {
				return o, err
			}
			overall = o
			break
		}
		for j, i := range idx {
			slots[i].dec, slots[i].decided = decs[j], true
			if decs[j].Allowed {
				slots[i].outcome = outcomeAllowed
			} else {
				slots[i].outcome = outcomeDenied
				overall = outcomeDenied
			}
		}
	}
	for i := range slots {
		sl := &slots[i]
		switch sl.kind {
		case kindDenied:
			sl.outcome = outcomeDenied
			if sl.rule.shadow {
				sl.outcome = outcomeShadowDenied
			}
		case kindShadow:
			err := s.callStore(ctx, domain, func(ctx context.Context) (err error) {
				sl.dec, err = s.store.Allow(ctx, sl.req)
				return err
			})
			sl.decided, sl.outcome = err == nil, outcomeFailOpen
			if err == nil {
				sl.outcome = outcomeAllowed
				if !sl.dec.Allowed {
					sl.outcome = outcomeShadowDenied
				}
			} else if ctx.Err() != nil {
				return outcomeCanceled, status.FromContextError(ctx.Err()).Err()
			}
		case kindPeek:
			if sl.rule.deny {
				continue // nothing is ever admitted: OK, nothing remaining
			}
			err := s.callStore(ctx, domain, func(ctx context.Context) (err error) {
				sl.req.Cost = 0
				sl.dec, err = s.store.Peek(ctx, sl.req)
				return err
			})
			sl.decided, sl.outcome = err == nil, outcomePeeked
			if err != nil && ctx.Err() != nil {
				return outcomeCanceled, status.FromContextError(ctx.Err()).Err()
			}
		}
	}
	if s.opts.shadow && overall == outcomeDenied {
		overall = outcomeShadowDenied
		for i := range slots {
			if slots[i].outcome == outcomeDenied {
				slots[i].outcome = outcomeShadowDenied
			}
		}
	}
	return overall, nil
}

// callStore runs one store call behind the breaker, under the store
// deadline, and records its latency.
func (s *Server) callStore(ctx context.Context, domain string, call func(context.Context) error) error {
	ok, probe := s.breaker.Allow()
	if !ok {
		return errBreakerOpen
	}
	start := time.Now()
	sctx, cancel := context.WithDeadline(ctx, start.Add(s.opts.storeTimeout))
	err := call(sctx)
	elapsed := time.Since(start)
	cancel()
	switch {
	case err == nil:
		s.breaker.Done(probe, breaker.OK)
		s.tel.recordStore(ctx, domain, elapsed, false)
	case errors.Is(err, tollgate.ErrInvalidRequest) || ctx.Err() != nil:
		s.breaker.Done(probe, breaker.NoNews)
	default:
		s.breaker.Done(probe, breaker.Failed)
		s.tel.recordStore(ctx, domain, elapsed, true)
	}
	return err
}

// failed turns a failed enforced decision into the fail mode's outcome and,
// for FailError, the error to answer with.
func (s *Server) failed(ctx context.Context, err error) (outcome, error) {
	switch {
	case ctx.Err() != nil:
		return outcomeCanceled, status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, tollgate.ErrInvalidRequest):
		return outcomeInvalid, status.Errorf(codes.Internal, "rate limit: the store refused a request the configuration allowed: %v", err)
	case s.opts.failMode == FailOpen:
		return outcomeFailOpen, nil
	}
	return outcomeFailClosed, status.Error(codes.Unavailable, "rate limit service unavailable: its store cannot decide")
}

// status is the slot's DescriptorStatus.
func (sl *slot) status() *pb.RateLimitResponse_DescriptorStatus {
	switch sl.kind {
	case kindNone:
		return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
	case kindUnlimited:
		return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	}
	st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, CurrentLimit: sl.rule.current}
	if sl.kind == kindDenied && !sl.rule.shadow {
		st.Code = pb.RateLimitResponse_OVER_LIMIT
	}
	if sl.decided {
		st.LimitRemaining = uint32(min(sl.remaining(), math.MaxUint32))
		st.DurationUntilReset = durationpb.New(sl.dec.ResetAfter)
		if sl.kind == kindEnforced && sl.overLimit() {
			st.Code = pb.RateLimitResponse_OVER_LIMIT
		}
	}
	return st
}

// overLimit reports whether the store found the descriptor over its limit.
// In a refused set, the descriptors that had room are not allowed (nothing
// was debited) but were not over their limit either: their RetryAfter is 0.
func (sl *slot) overLimit() bool { return !sl.dec.Allowed && sl.dec.RetryAfter > 0 }

// remaining is what is left for the descriptor after this request. A store
// reports the Remaining a decision would leave; where that decision was not
// applied (a descriptor with room in a refused set, or a look with
// hits_addend 0), nothing was taken, so the cost is still there.
func (sl *slot) remaining() int64 {
	notTaken := sl.kind == kindPeek && sl.dec.Allowed || sl.kind == kindEnforced && !sl.dec.Allowed && !sl.overLimit()
	if !notTaken {
		return sl.dec.Remaining
	}
	return min(sl.dec.Remaining+max(sl.req.Cost, 1), sl.req.Limit.Capacity())
}

// headers returns the response headers for the descriptor closest to its
// limit, an over-limit one winning, as envoyproxy/ratelimit picks it.
func (s *Server) headers(slots []slot) []*corev3.HeaderValue {
	var pick *slot
	var pickStatus *pb.RateLimitResponse_DescriptorStatus
	for i := range slots {
		sl := &slots[i]
		if sl.rule == nil || sl.kind == kindUnlimited {
			continue
		}
		st := sl.status()
		if pick == nil || st.Code == pb.RateLimitResponse_OVER_LIMIT || (pickStatus.Code != pb.RateLimitResponse_OVER_LIMIT && st.LimitRemaining < pickStatus.LimitRemaining) {
			pick, pickStatus = sl, st
		}
	}
	if pick == nil {
		return nil
	}
	reset := int64(0)
	if pick.decided {
		reset = int64((pick.dec.ResetAfter + time.Second - 1) / time.Second)
	}
	n := s.opts.headerNames
	return []*corev3.HeaderValue{
		{Key: n[0], Value: strconv.FormatUint(uint64(pickStatus.CurrentLimit.GetRequestsPerUnit()), 10)},
		{Key: n[1], Value: strconv.FormatUint(uint64(pickStatus.LimitRemaining), 10)},
		{Key: n[2], Value: strconv.FormatInt(reset, 10)},
	}
}
