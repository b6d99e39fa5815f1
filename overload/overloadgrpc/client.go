package overloadgrpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/overload"
)

// ClientOption configures the client interceptors.
type ClientOption func(*clientSide)

type clientSide struct {
	throttle *overload.Throttle
}

// WithThrottle makes the client refuse calls itself, per criticality, as
// the server refuses them (overload.Throttle): a throttled call fails with
// codes.Unavailable and RetryInfo without leaving the process.
func WithThrottle(t *overload.Throttle) ClientOption {
	return func(c *clientSide) { c.throttle = t }
}

func newClient(opts []ClientOption) *clientSide {
	c := &clientSide{}
	for _, o := range opts {
		o(c)
	}
	return c
}

// outgoing returns ctx with the criticality it carries in overload.Header,
// unless the outgoing metadata already names one, and the criticality the
// call goes with.
func outgoing(ctx context.Context) (context.Context, overload.Criticality) {
	md, _ := metadata.FromOutgoingContext(ctx)
	if v := md.Get(overload.Header); len(v) > 0 {
		c, err := overload.ParseCriticality(v[0])
		if err != nil {
			c = overload.DefaultCriticality
		}
		return ctx, c
	}
	c, ok := overload.CriticalityFrom(ctx)
	if !ok {
		return ctx, overload.DefaultCriticality
	}
	return metadata.AppendToOutgoingContext(ctx, overload.Header, c.String()), c
}

// send runs one call through the throttle, if any.
func (cl *clientSide) send(ctx context.Context, call func(context.Context) error) error {
	ctx, c := outgoing(ctx)
	if cl.throttle == nil {
		return call(ctx)
	}
	if err := cl.throttle.Allow(c); err != nil {
		return refusal(err)
	}
	err := call(ctx)
	code := status.Code(err)
	cl.throttle.Record(c, code != codes.Unavailable && code != codes.ResourceExhausted)
	return err
}

// UnaryClientInterceptor sends the criticality of the call's context
// (overload.WithCriticality; a server handler's context carries its own
// call's) in overload.Header, unless the outgoing metadata names one.
func UnaryClientInterceptor(opts ...ClientOption) grpc.UnaryClientInterceptor {
	cl := newClient(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return cl.send(ctx, func(ctx context.Context) error { return invoker(ctx, method, req, reply, cc, opts...) })
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams; the
// throttle judges a stream by how it opens.
func StreamClientInterceptor(opts ...ClientOption) grpc.StreamClientInterceptor {
	cl := newClient(opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		var s grpc.ClientStream
		err := cl.send(ctx, func(ctx context.Context) error {
			var err error
			s, err = streamer(ctx, desc, cc, method, opts...)
			return err
		})
		return s, err
	}
}
