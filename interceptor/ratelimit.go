package interceptor

import (
	"context"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MiddlewareLimiter adapts l to go-grpc-middleware's ratelimit.Limiter, for
// servers already built around that package's interceptors:
//
//	ratelimit.UnaryServerInterceptor(l.MiddlewareLimiter())
//
// It applies the same rules, keys, request ids, fail policy, spans and
// metrics, and sets the same trailers (so grpc-retry-pushback-ms still
// reaches the client's retry policy). Its limitation is that interceptor:
// it replaces every error with codes.ResourceExhausted and the error's text,
// so clients lose the RetryInfo and QuotaFailure details, and a FailClosed
// refusal arrives as ResourceExhausted rather than Unavailable. Rule.Cost
// applies (ratelimit gives no request message to a CostFunc) and PerMessage
// limits do not. Prefer UnaryServerInterceptor and StreamServerInterceptor.
func (l *Limiter) MiddlewareLimiter() ratelimit.Limiter { return middlewareLimiter{l} }

type middlewareLimiter struct{ l *Limiter }

// Limit decides for the call ctx belongs to; it finds the method with
// grpc.Method. It returns nil when the call may proceed.
func (m middlewareLimiter) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	set := m.l.book.Load().matcher.match(method)
	if set == nil {
		return nil
	}
	// ratelimit.Limiter does not see the end of the call: a rule's Settle
	// does not run, and its reservation stands; a seat could never be
	// released, so a rule with InFlight refuses the call.
	res, after := m.l.decide(ctx, &set.calls, Call{Method: method}, nil)
	if after != nil && after.seats != nil {
		for _, h := range after.seats {
			h.end()
		}
		return status.Errorf(codes.FailedPrecondition, "rate limit %q bounds calls in flight, and go-grpc-middleware's ratelimit interceptor cannot see a call end: use Limiter.UnaryServerInterceptor", after.seats[0].p.rule.Name)
	}
	if md := res.trailer(m.l.admittedTrailers); md != nil {
		_ = grpc.SetTrailer(ctx, md)
	}
	return res.err
}
