package interceptor

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/overload"
)

// UnaryClientInterceptor returns the client side of overload control: it
// sends the criticality of the call's context (overload.WithCriticality;
// a handler's context carries its own call's) in overload.Header, unless
// the outgoing metadata names one already. With a Throttle (nil for none)
// the client refuses calls itself, per criticality, as the servers refuse
// them: a throttled call fails with codes.Unavailable and RetryInfo
// without leaving the process.
func UnaryClientInterceptor(t *overload.Throttle) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return send(ctx, t, func(ctx context.Context) error { return invoker(ctx, method, req, reply, cc, opts...) })
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams; the
// Throttle judges a stream by how it opens.
func StreamClientInterceptor(t *overload.Throttle) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		var s grpc.ClientStream
		err := send(ctx, t, func(ctx context.Context) error {
			var err error
			s, err = streamer(ctx, desc, cc, method, opts...)
			return err
		})
		return s, err
	}
}

// send runs one call, with its criticality, through the throttle, if any.
func send(ctx context.Context, t *overload.Throttle, call func(context.Context) error) error {
	ctx, c := outgoing(ctx)
	if t == nil {
		return call(ctx)
	}
	if err := t.Allow(c); err != nil {
		var r *overload.Refusal
		errors.As(err, &r)
		st := status.New(codes.Unavailable, err.Error())
		if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)}); derr == nil {
			st = d
		}
		return st.Err()
	}
	err := call(ctx)
	code := status.Code(err)
	t.Record(c, code != codes.Unavailable && code != codes.ResourceExhausted)
	return err
}

// outgoing returns ctx sending the criticality it carries in
// overload.Header, unless the outgoing metadata names one already, and the
// criticality the call goes with (Critical for none, or one that does not
// parse).
func outgoing(ctx context.Context) (context.Context, overload.Criticality) {
	md, _ := metadata.FromOutgoingContext(ctx)
	if v := md.Get(overload.Header); len(v) > 0 {
		c, err := overload.ParseCriticality(v[0])
		if err != nil {
			c = overload.Critical
		}
		return ctx, c
	}
	c, ok := overload.CriticalityFrom(ctx)
	if !ok {
		return ctx, overload.Critical
	}
	return metadata.AppendToOutgoingContext(ctx, overload.Header, c.String()), c
}
