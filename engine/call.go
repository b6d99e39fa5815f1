package engine

import (
	"context"
	"net/http"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/tollgate/tollgate"
)

// A front door is a transport's adapter to a Limiter: the gRPC interceptors
// of this package, package httplimit (net/http) and the connectlimit module
// (connect-go). Each reads what a call is (Call, and the context
// IncomingContext makes) and translates the Verdict back; the rules, key
// functions, overrides, request ids, seats, settlements, fail modes,
// shadow rules and telemetry are the Limiter's, the same behind each.

// Call is one call as a front door presents it to Limiter.Begin.
type Call struct {
	// Method is what rules' Methods match and keyfunc.Method returns: a
	// gRPC full method or Connect procedure ("/pkg.Service/Method"), or an
	// HTTP route, its method and ServeMux pattern ("GET /items/{id}").
	Method string
	// Request is the request message a rule's CostFunc prices; nil for
	// none, and then the rule's Cost applies.
	Request any
	// Stream says the call is a stream: its seats live for the stream and
	// its messages are limited by PerMessage rules (Verdict.Received).
	Stream bool
	// NoEnd says the door never sees the call end, and never calls End
	// (go-grpc-middleware's ratelimit.Limiter): a rule with InFlight,
	// whose seat could never be given back, refuses the call, and a rule
	// with Settle keeps its reservation.
	NoEnd bool
}

// LimitDecision is one enforcing limit's part in a Verdict: what the store
// (or, under FailLocal, the local store) answered for it.
type LimitDecision struct {
	// Rule names the rule the limit belongs to.
	Rule string
	// Limit is the limit decided: the rule's, an override's, or the local
	// cap of FailLocal. It is zero for an in-flight limit.
	Limit tollgate.Limit
	// MaxInFlight is the in-flight limit (Rule.MaxInFlight) when Limit is
	// zero: Decision.Remaining seats are free.
	MaxInFlight int64
	// Decision is the store's answer for this limit.
	Decision tollgate.Decision
	// Denied reports that this limit refused the call.
	Denied bool
}

// Verdict is a Limiter's answer on one call made through Begin. Err says
// whether the call may go on; when it may, the handler runs with Context
// and End is called once it has returned.
type Verdict struct {
	l        *Limiter
	ctx      context.Context
	method   string
	messages *planSet // the stream's PerMessage plans; nil without
	after    *afterCall
	limits   []LimitDecision
	// limitBuf holds limits for the common call of one limit, so that
	// collecting them allocates nothing (BenchmarkMiddleware).
	limitBuf [1]LimitDecision

	mu  sync.Mutex
	res result // the latest decision with something to say
}

// IncomingContext returns ctx carrying a call that did not come through
// gRPC the way key functions and request ids read one: header as its
// incoming gRPC metadata (an HTTP header and a metadata key name one
// thing: keyfunc.Metadata("x-tenant") reads X-Tenant, case-insensitively)
// and remoteAddr ("host:port", as http.Request.RemoteAddr) as its peer,
// which keyfunc.Peer reads. header is not copied.
func IncomingContext(ctx context.Context, header http.Header, remoteAddr string) context.Context {
	ctx = metadata.NewIncomingContext(ctx, metadata.MD(header))
	if remoteAddr != "" {
		p := &remotePeer{addr: addr{remoteAddr}}
		p.Addr = &p.addr // one allocation for the peer and its address
		ctx = peer.NewContext(ctx, &p.Peer)
	}
	return ctx
}

// remotePeer is the peer of a call through another front door, with its
// address.
type remotePeer struct {
	peer.Peer
	addr addr
}

// addr is a remote address as a front door gives it ("host:port").
type addr struct{ s string }

func (a *addr) Network() string { return "tcp" }
func (a *addr) String() string  { return a.s }

// Begin decides call, made under ctx (see IncomingContext), by the rules
// whose Methods match call.Method, as the gRPC interceptors decide a call.
// A call no rule matches gets a Verdict that admits it and says nothing.
// Every Verdict whose Err is nil must be ended with End once the handler
// has returned (in a defer, so that a panic ends it too).
func (l *Limiter) Begin(ctx context.Context, call Call) *Verdict {
	v := &Verdict{l: l, ctx: ctx, method: call.Method}
	set := l.book.Load().matcher.match(call.Method)
	if set == nil {
		return v
	}
	v.limits = v.limitBuf[:0]
	if call.Stream {
		v.res, v.after = l.openStream(ctx, set, call.Method, &v.limits)
		if len(set.messages.plans) > 0 {
			v.messages = &set.messages
		}
	} else {
		v.res, v.after = l.decide(ctx, &set.calls, call, &v.limits)
	}
	if call.NoEnd && v.res.err == nil && v.after != nil {
		v.endNever(ctx)
	}
	if v.res.err == nil && v.after != nil && v.after.settles != nil {
		v.ctx = withReport(ctx)
	}
	return v
}

// Err is nil when the call may go on; otherwise it is the gRPC status the
// call is refused with, as the gRPC interceptors return it:
// codes.ResourceExhausted with errdetails.RetryInfo and
// errdetails.QuotaFailure for a denial, codes.InvalidArgument for a caller
// the key function cannot identify or a malformed request id,
// codes.PermissionDenied for a blocked caller, codes.Unavailable under
// FailClosed, codes.Internal for a rule's own failure.
func (v *Verdict) Err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.res.err
}

// Context returns the context the handler runs with: ctx of Begin, and,
// for a rule with Settle, the report ReportCost adds to.
func (v *Verdict) Context() context.Context { return v.ctx }

// Decision returns the decision the call's trailers describe (the most
// restrictive one of the call, or of its latest message), and false when
// no store decided.
func (v *Verdict) Decision() (tollgate.Decision, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.res.decision, v.res.hasDecision()
}

// Limits returns the decisions of every enforcing limit that was decided
// on the call's opening, in the rules' order: empty when no store decided
// (no rule matched, the call was refused before, or the store failed and
// FailOpen or FailClosed applied). Shadow rules are not among them.
func (v *Verdict) Limits() []LimitDecision { return v.limits }

// Trailer returns the rate-limit metadata the gRPC interceptors would send
// as trailers for the call's latest decision (see WithAdmittedTrailers),
// or nil.
func (v *Verdict) Trailer() metadata.MD {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.res.trailer(v.l.admittedTrailers)
}

// Received decides one message the client sent on a stream, under the
// PerMessage limits of its rules, as the stream interceptor's RecvMsg
// does: nil admits it; a Shape rule's denial waits within ctx. Call it
// after the message arrived; on a call that is not a stream, or without
// PerMessage rules, it returns nil.
func (v *Verdict) Received(ctx context.Context) error {
	if v.messages == nil {
		return nil
	}
	return v.l.receive(ctx, v.messages, v.method, v.remember)
}

func (v *Verdict) remember(res result) {
	if res.hasDecision() {
		v.mu.Lock()
		v.res = res
		v.mu.Unlock()
	}
}

// End ends an admitted call whose handler returned resp and err: the
// call's rules are settled (Rule.Settle sees resp and err) and its seats
// released, without the response waiting for the store. A call ends once:
// later calls of End do nothing, and End on a refused call does nothing.
func (v *Verdict) End(resp any, err error) {
	v.l.end(v.ctx, v.after, resp, err)
}

// EndPanicked ends the call as End does for a handler that panicked: its
// rules' Settle see a codes.Internal status. After End, it does nothing, so
// a front door defers it before running the handler.
func (v *Verdict) EndPanicked() {
	v.l.end(v.ctx, v.after, nil, errPanicked)
}

// appendLimits appends to out the decision of every limit of the
// enforcing checks that a store decided.
func appendLimits(out []LimitDecision, enforcing []*check) []LimitDecision {
	for _, c := range enforcing {
		name := c.p.rule.Name
		if c.res.hasDecision() && !c.seat.refused() {
			for i, d := range c.decs {
				out = append(out, LimitDecision{Rule: name, Limit: c.limits[i].limit, Decision: d, Denied: c.denies(d)})
			}
		}
		if s := c.seat; s != nil && s.asked {
			d := tollgate.Decision{Allowed: s.dec.Allowed, Remaining: max(s.req.Max-s.dec.InUse, 0)}
			if s.refused() {
				d.RetryAfter = seatRetryAfter(c)
			}
			out = append(out, LimitDecision{Rule: name, MaxInFlight: s.req.Max, Decision: d, Denied: s.refused()})
		}
	}
	return out
}

// endNever ends at once an admitted call whose door never ends it
// (Call.NoEnd): its settlements are dropped (the reservations stand) and
// its seats given back, refusing the call when it took one.
func (v *Verdict) endNever(ctx context.Context) {
	a := v.after
	a.settles = nil
	if len(a.seats) == 0 {
		v.after = nil
		return
	}
	name := a.seats[0].p.rule.Name
	v.l.end(ctx, a, nil, nil)
	v.after = nil
	v.res.reject(outcomeInvalid, codes.FailedPrecondition, nil, "rate limit %q bounds calls in flight, and this door cannot see a call end: use a door that does (Limiter.UnaryServerInterceptor)", name)
}
