package interceptor

import (
	"context"
	"sync"
	"time"

	"github.com/tollgate/tollgate/telemetry"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
)

// UnaryServerInterceptor returns the interceptor that limits unary calls.
// A denied call never reaches the handler. The rate-limit metadata is set
// with grpc.SetTrailer, never as headers, so that the handler's own errors
// stay retryable by the client's retry policy.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		set := l.book.Load().matcher.match(info.FullMethod)
		if set == nil {
			return handler(ctx, req)
		}
		res, after := l.decide(ctx, &set.calls, Call{Method: info.FullMethod, Request: req}, nil)
		if md := res.trailer(l.admittedTrailers); md != nil {
			// SetTrailer fails only outside a gRPC server call, where there
			// is no one to tell.
			_ = grpc.SetTrailer(ctx, md)
		}
		if res.err != nil {
			return nil, res.err
		}
		if after == nil {
			return handler(ctx, req)
		}
		if after.settles != nil {
			ctx = withReport(ctx)
		}
		// A handler that panics ends the call too (an outer recovery
		// interceptor may catch it): its seats are freed and it is settled
		// as a call that failed. After the end below, this does nothing.
		defer l.end(ctx, after, nil, errPanicked)
		resp, err := handler(ctx, req)
		l.end(ctx, after, resp, err)
		return resp, err
	}
}

// StreamServerInterceptor returns the interceptor that limits streams: one
// decision, at each rule's Cost, when the stream opens, and, when some of
// the stream's rules have PerMessage, one for every message the client
// sends, all or nothing across those rules. A message is held back (Shape)
// only when every rule denying it shapes. The trailers describe the
// stream's last decision when it denied, or, with WithAdmittedTrailers,
// whatever it was.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		set := l.book.Load().matcher.match(info.FullMethod)
		if set == nil {
			return handler(srv, ss)
		}
		res, after := l.openStream(ss.Context(), set, info.FullMethod, nil)
		if res.err != nil {
			if md := res.trailer(l.admittedTrailers); md != nil {
				ss.SetTrailer(md)
			}
			return res.err
		}
		if after != nil && after.settles != nil {
			ss = &reportingStream{ServerStream: ss, ctx: withReport(ss.Context())}
		}
		defer l.end(ss.Context(), after, nil, errPanicked) // as for unary calls
		if len(set.messages.plans) == 0 {
			if md := res.trailer(l.admittedTrailers); md != nil {
				ss.SetTrailer(md)
			}
			err := handler(srv, ss)
			l.end(ss.Context(), after, nil, err)
			return err
		}
		ls := &limitedStream{ServerStream: ss, l: l, plans: &set.messages, method: info.FullMethod, last: res}
		err := handler(srv, ls)
		// Set once, after the handler: SetTrailer appends, and the client
		// should see one value per key.
		last := ls.lastResult()
		if md := last.trailer(l.admittedTrailers); md != nil {
			ss.SetTrailer(md)
		}
		l.end(ss.Context(), after, nil, err)
		return err
	}
}

// openStream decides a stream's opening. A stream that finds no free seat
// of a rule with InFlight.StreamWait waits for one, within the stream's
// context and that wait, asking again after each suggested wait. out is
// decide's.
func (l *Limiter) openStream(ctx context.Context, set *ruleSet, method string, out *[]LimitDecision) (result, *afterCall) {
	start := l.clk.now()
	var waited time.Duration
	for {
		res, after := l.decide(ctx, &set.calls, Call{Method: method, Stream: true}, out)
		if res.err == nil || !res.seatWait {
			if waited > 0 {
				l.seatTel.wait.Record(ctx, l.clk.since(start).Seconds(), metric.WithAttributes(telemetry.AttrRule.String(set.calls.plans[0].rule.Name)))
			}
			return res, after
		}
		wait := max(res.decision.RetryAfter, time.Millisecond)
		if waited+wait > res.maxShapeWait {
			return res, after
		}
		waited += wait
		if err := l.clk.sleep(ctx, wait); err != nil {
			return res, after
		}
	}
}

// reportingStream gives a stream's handler the context ReportCost adds to.
type reportingStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context, carrying its cost report.
func (s *reportingStream) Context() context.Context { return s.ctx }

// limitedStream makes one decision per received message.
type limitedStream struct {
	grpc.ServerStream
	l      *Limiter
	plans  *planSet // the message plans of the stream's rules
	method string

	mu   sync.Mutex
	last result // the latest decision with something to say in trailers
}

func (s *limitedStream) lastResult() result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func (s *limitedStream) remember(res result) {
	if res.hasDecision() {
		s.mu.Lock()
		s.last = res
		s.mu.Unlock()
	}
}

// RecvMsg receives a message and then has it judged: a message that never
// arrives costs nothing.
func (s *limitedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.l.receive(s.Context(), s.plans, s.method, s.remember)
}

// receive decides one message received on a stream to method under plans
// (its rules' PerMessage limits), telling remember each result. A message
// a Shape rule denies waits until it fits, within the bound and the
// stream's life; otherwise the denial is the error.
func (l *Limiter) receive(ctx context.Context, plans *planSet, method string, remember func(result)) error {
	var waited time.Duration
	for {
		res, _ := l.decide(ctx, plans, Call{Method: method}, nil)
		remember(res)
		if res.err == nil || !res.hasDecision() || !res.shape {
			return res.err
		}
		// A zero wait would spin, so wait at least 1ms.
		wait := max(res.decision.RetryAfter, time.Millisecond)
		if waited+wait > res.maxShapeWait {
			return res.err
		}
		waited += wait
		if err := l.clk.sleep(ctx, wait); err != nil {
			return err
		}
	}
}
