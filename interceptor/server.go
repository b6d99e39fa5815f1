package interceptor

import (
	"context"

	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/engine"
)

// UnaryServerInterceptor returns the interceptor that limits unary calls.
// A denied call never reaches the handler. The rate-limit metadata is set
// with grpc.SetTrailer, never as headers, so that the handler's own errors
// stay retryable by the client's retry policy.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		v := l.Begin(ctx, engine.Call{Method: info.FullMethod, Request: req})
		if md := v.Trailer(); md != nil {
			// SetTrailer fails only outside a gRPC server call, where there
			// is no one to tell.
			_ = grpc.SetTrailer(ctx, md)
		}
		if err := v.Err(); err != nil {
			return nil, err
		}
		// A handler that panics ends the call too (an outer recovery
		// interceptor may catch it): its seats are freed and it is settled
		// as a call that failed. After End below, this does nothing.
		defer v.EndPanicked()
		resp, err := handler(v.Context(), req)
		v.End(resp, err)
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
		v := l.Begin(ss.Context(), engine.Call{Method: info.FullMethod, Stream: true})
		if err := v.Err(); err != nil {
			if md := v.Trailer(); md != nil {
				ss.SetTrailer(md)
			}
			return err
		}
		defer v.EndPanicked() // as for unary calls
		err := handler(srv, &limitedStream{ServerStream: ss, v: v})
		// Set once, after the handler: SetTrailer appends, and the client
		// should see one value per key.
		if md := v.Trailer(); md != nil {
			ss.SetTrailer(md)
		}
		v.End(nil, err)
		return err
	}
}

// limitedStream gives the handler the call's context (carrying its cost
// report) and has every message it receives judged.
type limitedStream struct {
	grpc.ServerStream
	v *engine.Verdict
}

// Context returns the stream's context, carrying its cost report.
func (s *limitedStream) Context() context.Context { return s.v.Context() }

// RecvMsg receives a message and then has it judged: a message that never
// arrives costs nothing.
func (s *limitedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.v.Received(s.ServerStream.Context())
}
