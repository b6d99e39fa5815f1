package overloadgrpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/overload"
)

// outgoing returns ctx with the criticality it carries in overload.Header,
// unless the outgoing metadata already names one.
func outgoing(ctx context.Context) context.Context {
	c, ok := overload.CriticalityFrom(ctx)
	if !ok {
		return ctx
	}
	if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(overload.Header)) > 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, overload.Header, c.String())
}

// UnaryClientInterceptor sends the criticality of the call's context
// (overload.WithCriticality; a server handler's context carries its own
// call's) in overload.Header.
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(outgoing(ctx), method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams.
func StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(outgoing(ctx), desc, cc, method, opts...)
	}
}
