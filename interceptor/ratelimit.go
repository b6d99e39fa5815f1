package interceptor

import (
	"context"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/grpcstatus"
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
// limits do not; it never sees a call end, so a rule's Settle keeps its
// reservation and a rule with InFlight refuses every call. Prefer
// UnaryServerInterceptor and StreamServerInterceptor.
func (l *Limiter) MiddlewareLimiter() ratelimit.Limiter { return middlewareLimiter{l} }

type middlewareLimiter struct{ l *Limiter }

// Limit decides for the call ctx belongs to; it finds the method with
// grpc.Method. It returns nil when the call may proceed.
func (m middlewareLimiter) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	v := m.l.Begin(ctx, engine.Call{Method: method, Header: header(ctx), Peer: peerOf(ctx), NoEnd: true, QuietAdmitted: !m.l.AdmittedTrailers()})
	if md := grpcstatus.Trailer(&v, m.l.AdmittedTrailers()); md != nil {
		_ = grpc.SetTrailer(ctx, md)
	}
	return grpcstatus.Refusal(&v)
}
