package engine

import (
	"context"
	"net"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/shed"
	"github.com/tollgate/tollgate/keyfunc"
)

// A door is a transport's adapter to a Limiter: the gRPC interceptors
// (package interceptor), package httplimit (net/http) and the connectlimit
// module (connect-go). Each presents its calls the same way (Call), runs
// the handler of an admitted one, and answers a refused one in its own
// wire's terms from the Verdict (Kind, RetryAfter, Limits). The rules, key
// functions, overrides, request ids, seats, settlements, fail modes,
// shadow rules and telemetry are the Limiter's, the same behind each.

// Call is one call as a door presents it to Begin.
type Call struct {
	// Method is what rules' Methods match and keyfunc.Method returns: a
	// gRPC full method or Connect procedure ("/pkg.Service/Method"), or an
	// HTTP route, its method and ServeMux pattern ("GET /items/{id}").
	Method string
	// Header is the call's headers or metadata, where key functions and
	// the request id are read (keyfunc.HTTPHeader, keyfunc.MetadataHeader).
	Header keyfunc.Header
	// Peer is the address of the call's remote end, which keyfunc.Peer
	// reads (keyfunc.Call.Peer); nil for none. It is formatted only when a
	// key function reads it; an address known as text is a keyfunc.Addr.
	Peer net.Addr
	// Request is the request message a rule's CostFunc prices; nil for
	// none, and then the rule's Cost applies.
	Request any
	// Stream says the call is a stream: its seats live for the stream and
	// its messages are limited by PerMessage rules (Verdict.Received).
	Stream bool
	// NoEnd says the door never sees the call end, and never calls End
	// (go-grpc-middleware's ratelimit.Limiter): a rule with InFlight,
	// whose seat could never be given back, refuses the call as a Fault,
	// and a rule with Settle keeps its reservation.
	NoEnd bool
	// QuietAdmitted says the door reports no limits on an admitted call
	// (the RPC doors without Config.AdmittedTrailers): Limits is then empty
	// for it, unless a decision replayed a request id, so that the call
	// does not pay for states nobody reads. A refused call's are kept.
	QuietAdmitted bool
}

// LimitDecision is one deciding limit's part in a Verdict: its own state
// after the decision, which every door reports under the same name with
// the same values.
type LimitDecision struct {
	// Rule names the rule the limit belongs to.
	Rule string
	// Policy names the limit as every door reports it: the rule's name,
	// or, for a rule that decided several limits of the call, the rule's
	// name, "/" and the limit's period or calendar unit ("per-tenant/1s",
	// "per-tenant/daily"; and "/" and its algorithm when two share one) or
	// "/in-flight".
	Policy string
	// Limit is the limit decided: the rule's, an override's, or the local
	// cap of FailLocal. It is zero for an in-flight limit.
	Limit tollgate.Limit
	// MaxInFlight is the in-flight limit (Rule.InFlight.Max) when Limit is
	// zero: Decision.Remaining seats are free.
	MaxInFlight int64
	// Decision is the limit's state: what the store answered for it. A
	// limit that would have admitted a call another limit denied reports
	// its state as it is, since nothing was debited.
	Decision tollgate.Decision
	// Denied reports that this limit refused the call.
	Denied bool
}

// Verdict is a Limiter's answer on one call made through Begin. Err says
// whether the call may go on; when it may, the handler runs with Context
// and End is called once it has returned. A door keeps it where it runs
// the call (a variable on its stack, for a unary call: deciding one
// allocates no Verdict). Its methods are not safe for concurrent use: a
// stream's door calls Received from the one goroutine receiving, and reads
// the Verdict after the handler has returned.
type Verdict struct {
	l      *Limiter
	ctx    context.Context
	stream *messages // a stream's with PerMessage rules; nil without
	after  *afterCall
	seat   *shed.Seat // overload control's (Config.Overload, or a rule's own); nil without
	// moreSeats are the seats of a call matched by more than one rule with
	// an Overload of its own, past the first; nil without.
	moreSeats []*shed.Seat
	limits    limitList // of the latest decision with a limit to report
	err       error     // the latest refusal (a *refusal); nil admits
}

// messages is what a stream's messages are decided by: the PerMessage
// plans of its rules, and the call a message is presented as. It is kept
// apart from the Verdict, which every call's door holds on its stack: the
// smaller that frame, the less a call's goroutine grows its stack.
type messages struct {
	plans *planSet
	call  Call
}

// limitList is a decision's limits: one kept inline (the common call,
// which then allocates nothing for them), several in a slice of their own.
type limitList struct {
	one  [1]LimitDecision
	n    int
	many []LimitDecision
}

// list returns the limits.
func (ll *limitList) list() []LimitDecision {
	if ll.many != nil {
		return ll.many
	}
	return ll.one[:ll.n]
}

// Begin decides call, made under ctx, by the rules whose Methods match
// call.Method. A call no rule matches gets a Verdict that admits it and
// reports no limit. Every Verdict whose Err is nil must be ended with End
// once the handler has returned (in a defer, so that a panic ends it too).
//
// Begin is the one entry of every door: a step every call must pass
// whatever door it came through (overload control, say) goes here, before
// any rule is decided.
func (l *Limiter) Begin(ctx context.Context, call Call) (v Verdict) {
	v.l, v.ctx = l, ctx
	set := l.book.Load().matcher.match(call.Method)
	if l.admission != nil || set != nil && set.admissions != nil {
		if !l.admit(&v, &call, set) {
			return v
		}
		ctx = v.ctx
	}
	if set == nil || len(set.calls.plans) == 0 {
		return v
	}
	v.after, v.err = l.decide(ctx, &set.calls, &call, &v.limits)
	if v.err != nil {
		v.releaseSeats()
	}
	if call.Stream && len(set.messages.plans) > 0 {
		v.stream = &messages{plans: &set.messages, call: Call{Method: call.Method, Header: call.Header, Peer: call.Peer, QuietAdmitted: call.QuietAdmitted}}
	}
	if v.err == nil && v.after != nil && v.after.settles != nil {
		v.ctx = withReport(ctx)
	}
	return v
}

// Err is nil when the call may go on; otherwise it is the refusal, whose
// message names the rule and what to do (for a denial, the wait), and
// which wraps its cause, if any (a key function's error, the context's).
// After Received it describes the latest message's decision.
func (v *Verdict) Err() error { return v.err }

// Kind says why the call was refused; it is meaningful when Err is not nil.
func (v *Verdict) Kind() Kind {
	if r, ok := v.err.(*refusal); ok {
		return r.kind
	}
	return 0
}

// RetryAfter is, for a denial, how long until the same call is admitted if
// nobody else consumes: the longest wait of the denying limits, exact to
// the microsecond. It is 0 otherwise.
func (v *Verdict) RetryAfter() time.Duration {
	if r, ok := v.err.(*refusal); ok {
		return r.retryAfter
	}
	return 0
}

// Context returns the context the handler runs with: ctx of Begin, and,
// for a rule with Settle, the report ReportCost adds to.
func (v *Verdict) Context() context.Context { return v.ctx }

// Limits returns the state of every enforcing limit that was decided on
// the call's latest decision with one to report (its opening, or a
// stream's latest message), in the rules' order: empty when no store
// decided (no rule matched, the call was refused before, or the store
// failed and FailOpen or FailClosed applied). Shadow rules are not among
// them. The slice is the Verdict's: read it, do not keep it past End.
func (v *Verdict) Limits() []LimitDecision { return v.limits.list() }

// Received decides one message the client sent on a stream, under the
// PerMessage limits of its rules: nil admits it; a Shape rule's denial
// waits within ctx. Call it after the message arrived; on a call that is
// not a stream, or without PerMessage rules, it returns nil. Its refusal
// is also what Err, Kind, RetryAfter and Limits report afterwards.
func (v *Verdict) Received(ctx context.Context) error {
	if v.stream == nil {
		return nil
	}
	var limits limitList
	_, v.err = v.l.decide(ctx, v.stream.plans, &v.stream.call, &limits)
	if limits.n > 0 || limits.many != nil {
		v.limits = limits
	}
	return v.err
}

// Settles reports whether the call's rules settle its final cost once it
// ends (Rule.Settle), from what End is given: a door builds what its
// handler returned (a response, a status) only then. End is still called
// either way.
func (v *Verdict) Settles() bool { return v.after != nil && v.after.settles != nil }

// End ends an admitted call whose handler returned resp and err: the
// call's rules are settled (Rule.Settle sees resp and err) and its seats
// released, without the response waiting for the store. A call ends once:
// later calls of End do nothing, and End on a refused call does nothing.
func (v *Verdict) End(resp any, err error) {
	v.doneSeats()
	v.l.end(v.ctx, v.after, resp, err)
}

// EndPanicked ends the call as End does for a handler that panicked: its
// rules' Settle see errPanicked. After End, it does nothing, so a door
// defers it before running the handler.
func (v *Verdict) EndPanicked() {
	v.doneSeats()
	v.l.end(v.ctx, v.after, nil, errPanicked)
}
