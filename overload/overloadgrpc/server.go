// Package overloadgrpc puts an overload.Limiter in front of a gRPC server
// and carries a call's criticality from client to server and on to the
// calls its handler makes.
//
// On the server, TapHandle refuses the calls the Limiter would shed before
// grpc-go creates a stream for them (the cheapest refusal there is), and
// the interceptors queue the rest for a seat. On the client, the
// interceptors send the criticality of the call's context in
// overload.Header.
package overloadgrpc

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/overload"
)

// TenantFunc names the tenant of a call from its incoming metadata.
type TenantFunc func(md metadata.MD) string

// TenantHeader returns a TenantFunc that reads the first value of header.
func TenantHeader(header string) TenantFunc {
	return func(md metadata.MD) string {
		if v := md.Get(header); len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

// Server adapts a Limiter to a gRPC server.
type Server struct {
	l      *overload.Limiter
	tenant TenantFunc
}

// NewServer returns the gRPC adapter of l; tenant may be nil (one tenant).
func NewServer(l *overload.Limiter, tenant TenantFunc) *Server {
	if tenant == nil {
		tenant = func(metadata.MD) string { return "" }
	}
	return &Server{l: l, tenant: tenant}
}

// Options returns the server options that install s: the tap handle and
// both interceptors (chained after any already given).
func (s *Server) Options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InTapHandle(s.TapHandle),
		grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(s.StreamServerInterceptor()),
	}
}

type callKey struct{}

// call reads the call from md: a criticality that does not parse counts as
// the default one, never as a higher one.
func (s *Server) call(md metadata.MD) overload.Call {
	c, _ := overload.FromHeaders(func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	})
	return overload.Call{Criticality: c, Tenant: s.tenant(md)}
}

// TapHandle is a tap.ServerInHandle (grpc.InTapHandle): it reads the call
// once, refuses it when the Limiter would shed it now, and otherwise hands
// it to the interceptors through the stream's context.
func (s *Server) TapHandle(ctx context.Context, info *tap.Info) (context.Context, error) {
	c := s.call(info.Header)
	if err := s.l.Check(c); err != nil {
		return ctx, refusal(err)
	}
	return context.WithValue(ctx, callKey{}, c), nil
}

// acquire waits for a seat for the call of ctx; the context it returns
// carries the call's criticality for the calls the handler makes.
func (s *Server) acquire(ctx context.Context) (context.Context, *overload.Seat, error) {
	c, ok := ctx.Value(callKey{}).(overload.Call)
	if !ok {
		md, _ := metadata.FromIncomingContext(ctx)
		c = s.call(md)
	}
	seat, err := s.l.Acquire(ctx, c)
	if err != nil {
		return ctx, nil, refusal(err)
	}
	return overload.WithCriticality(ctx, c.Criticality), seat, nil
}

// UnaryServerInterceptor waits for a seat, runs the handler, and gives
// the seat back when the handler returns or panics.
func (s *Server) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, seat, err := s.acquire(ctx)
		if err != nil {
			pushback(ctx, err)
			return nil, err
		}
		defer seat.Done()
		return handler(ctx, req)
	}
}

// StreamServerInterceptor holds a seat for the stream's whole life.
func (s *Server) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, seat, err := s.acquire(ss.Context())
		if err != nil {
			if st, ok := status.FromError(err); ok {
				ss.SetTrailer(pushbackMD(st))
			}
			return err
		}
		defer seat.Done()
		return handler(srv, &stream{ServerStream: ss, ctx: ctx})
	}
}

type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

// refusal is the status of a shed call: Unavailable (the server, not the
// caller, is short) with RetryInfo; a context's end keeps its own code.
func refusal(err error) error {
	var r *overload.Refusal
	if !errors.As(err, &r) {
		return status.FromContextError(err).Err()
	}
	st := status.New(codes.Unavailable, r.Error())
	if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)}); derr == nil {
		st = d
	}
	return st.Err()
}

// pushback sets grpc-retry-pushback-ms, so that gRPC's retry policy waits
// the hint, on a unary call's trailers.
func pushback(ctx context.Context, err error) {
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable {
		_ = grpc.SetTrailer(ctx, pushbackMD(st))
	}
}

func pushbackMD(st *status.Status) metadata.MD {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return metadata.Pairs("grpc-retry-pushback-ms", strconv.FormatInt(ri.GetRetryDelay().AsDuration().Milliseconds(), 10))
		}
	}
	return nil
}
