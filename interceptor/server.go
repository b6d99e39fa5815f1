package interceptor

import (
	"context"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/grpcstatus"
	"github.com/tollgate/tollgate/keyfunc"
)

// errPanicked is the error a call whose handler panicked is settled with
// (Rule.Settle sees it), whatever an outer recovery interceptor answers.
var errPanicked = status.Error(codes.Internal, "interceptor: the handler panicked")

// UnaryServerInterceptor returns the interceptor that limits unary calls.
// A denied call never reaches the handler. The rate-limit metadata is set
// with grpc.SetTrailer, never as headers, so that the handler's own errors
// stay retryable by the client's retry policy.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		v := l.Begin(ctx, engine.Call{Method: info.FullMethod, Header: header(ctx), Peer: peerOf(ctx), Request: req, QuietAdmitted: !l.AdmittedTrailers()})
		if md := grpcstatus.Trailer(&v, l.AdmittedTrailers()); md != nil {
			// SetTrailer fails only outside a gRPC server call, where there
			// is no one to tell.
			_ = grpc.SetTrailer(ctx, md)
		}
		if err := grpcstatus.Refusal(&v); err != nil {
			return nil, err
		}
		// A handler that panics ends the call too (an outer recovery
		// interceptor may catch it): its seats are freed and it is settled
		// as a call that failed. After End below, this does nothing.
		defer v.End(nil, errPanicked)
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
// stream's last decision when it was refused, or, with
// WithAdmittedTrailers, whatever it was.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		v := l.Begin(ctx, engine.Call{Method: info.FullMethod, Header: header(ctx), Peer: peerOf(ctx), Stream: true, QuietAdmitted: !l.AdmittedTrailers()})
		if err := grpcstatus.Refusal(&v); err != nil {
			if md := grpcstatus.Trailer(&v, l.AdmittedTrailers()); md != nil {
				ss.SetTrailer(md)
			}
			return err
		}
		defer v.End(nil, errPanicked) // as for unary calls
		err := handler(srv, &limitedStream{ServerStream: ss, v: &v})
		// Set once, after the handler: SetTrailer appends, and the client
		// should see one value per key.
		if md := grpcstatus.Trailer(&v, l.AdmittedTrailers()); md != nil {
			ss.SetTrailer(md)
		}
		v.End(nil, err)
		return err
	}
}

// header presents a gRPC call's metadata to the engine, read where grpc-go
// keeps it (its "-bin" values decoded). The call is built where Begin is
// called, so that it is not copied on the way: a handler's goroutine
// starts with a small stack.
func header(ctx context.Context) keyfunc.Header {
	return keyfunc.MetadataHeader(ctx, metadata.ValueFromIncomingContext)
}

// peerOf is the address of the call's peer, or nil. It is formatted only
// when a key function reads it: a TCP address's String allocates.
func peerOf(ctx context.Context) net.Addr {
	if p, ok := peer.FromContext(ctx); ok {
		return p.Addr
	}
	return nil
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
	if s.v.Received(s.ServerStream.Context()) != nil {
		return grpcstatus.Refusal(s.v)
	}
	return nil
}
