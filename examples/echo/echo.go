// Package echo is a tiny gRPC service, written by hand without protoc, that
// the examples and the end-to-end tests put behind the rate limiter. It has
// one method of each shape a limiter must handle: unary (Say),
// server-streaming (Count) and bidirectional streaming (Chat). Every message
// is a google.protobuf.StringValue, so no generated code is needed.
package echo

import (
	"context"
	"io"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ServiceName is the fully qualified gRPC service name.
const ServiceName = "tollgate.example.Echo"

// Full method names, as seen by server interceptors in
// grpc.UnaryServerInfo.FullMethod and grpc.StreamServerInfo.FullMethod.
const (
	// SayMethod is the unary method: it answers with the message it received.
	SayMethod = "/" + ServiceName + "/Say"
	// CountMethod is the server-streaming method: it answers a request whose
	// value is a decimal n with n messages "1", "2", … "n".
	CountMethod = "/" + ServiceName + "/Count"
	// ChatMethod is the bidirectional method: it answers every message it
	// receives with the same message, until the client closes its side.
	ChatMethod = "/" + ServiceName + "/Chat"
	// AllMethods is the method pattern that matches every method of the
	// service, in the "/pkg.Service/*" form rate-limit rules accept.
	AllMethods = "/" + ServiceName + "/*"
)

// MaxCount is the largest n Count accepts; a larger one is answered with
// codes.InvalidArgument, so a single request cannot make the server stream
// without end.
const MaxCount = 10000

// EchoServer is the server API of the Echo service.
type EchoServer interface {
	// Say answers with the message it received.
	Say(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
	// Count streams the messages "1" … "n" for a request whose value is the
	// decimal n (0 ≤ n ≤ MaxCount).
	Count(in *wrapperspb.StringValue, stream grpc.ServerStreamingServer[wrapperspb.StringValue]) error
	// Chat sends back every message it receives until the client closes
	// its side of the stream.
	Chat(stream grpc.BidiStreamingServer[wrapperspb.StringValue, wrapperspb.StringValue]) error
}

// Register registers srv as the Echo service on s.
func Register(s grpc.ServiceRegistrar, srv EchoServer) {
	s.RegisterService(&ServiceDesc, srv)
}

// Server is the default EchoServer. The zero value echoes; set Before to make
// calls fail on demand.
type Server struct {
	// Before, when not nil, runs at the start of every call with the call's
	// context and full method name (SayMethod, CountMethod or ChatMethod).
	// A non-nil error is returned to the client as the call's status
	// instead of running the method, which lets tests make a handler fail
	// (for example with codes.Unavailable to provoke a client retry) and
	// observe what the call carried (its incoming metadata).
	Before func(ctx context.Context, fullMethod string) error
}

var _ EchoServer = (*Server)(nil)

func (s *Server) before(ctx context.Context, fullMethod string) error {
	if s.Before == nil {
		return nil
	}
	return s.Before(ctx, fullMethod)
}

// Say implements EchoServer.
func (s *Server) Say(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	if err := s.before(ctx, SayMethod); err != nil {
		return nil, err
	}
	return wrapperspb.String(in.GetValue()), nil
}

// Count implements EchoServer.
func (s *Server) Count(in *wrapperspb.StringValue, stream grpc.ServerStreamingServer[wrapperspb.StringValue]) error {
	if err := s.before(stream.Context(), CountMethod); err != nil {
		return err
	}
	n, err := strconv.Atoi(in.GetValue())
	if err != nil || n < 0 || n > MaxCount {
		return status.Errorf(codes.InvalidArgument, "count: want a decimal number from 0 to %d, got %q", MaxCount, in.GetValue())
	}
	for i := 1; i <= n; i++ {
		if err := stream.Send(wrapperspb.String(strconv.Itoa(i))); err != nil {
			return err
		}
	}
	return nil
}

// Chat implements EchoServer.
func (s *Server) Chat(stream grpc.BidiStreamingServer[wrapperspb.StringValue, wrapperspb.StringValue]) error {
	if err := s.before(stream.Context(), ChatMethod); err != nil {
		return err
	}
	for {
		in, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(wrapperspb.String(in.GetValue())); err != nil {
			return err
		}
	}
}

// ServiceDesc describes the Echo service for grpc.ServiceRegistrar; it is
// what protoc-gen-go-grpc would generate for the service.
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*EchoServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Say", Handler: sayHandler},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "Count", Handler: countHandler, ServerStreams: true},
		{StreamName: "Chat", Handler: chatHandler, ServerStreams: true, ClientStreams: true},
	},
	Metadata: "tollgate/example/echo.proto",
}

func sayHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(wrapperspb.StringValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(EchoServer).Say(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: SayMethod}
	handler := func(ctx context.Context, req any) (any, error) {
		return srv.(EchoServer).Say(ctx, req.(*wrapperspb.StringValue))
	}
	return interceptor(ctx, in, info, handler)
}

func countHandler(srv any, stream grpc.ServerStream) error {
	in := new(wrapperspb.StringValue)
	if err := stream.RecvMsg(in); err != nil {
		return err
	}
	return srv.(EchoServer).Count(in, &grpc.GenericServerStream[wrapperspb.StringValue, wrapperspb.StringValue]{ServerStream: stream})
}

func chatHandler(srv any, stream grpc.ServerStream) error {
	return srv.(EchoServer).Chat(&grpc.GenericServerStream[wrapperspb.StringValue, wrapperspb.StringValue]{ServerStream: stream})
}

// Client is a client of the Echo service.
type Client struct {
	cc grpc.ClientConnInterface
}

// NewClient returns a Client that calls the Echo service over cc.
func NewClient(cc grpc.ClientConnInterface) *Client {
	return &Client{cc: cc}
}

// Say calls SayMethod.
func (c *Client) Say(ctx context.Context, in *wrapperspb.StringValue, opts ...grpc.CallOption) (*wrapperspb.StringValue, error) {
	out := new(wrapperspb.StringValue)
	if err := c.cc.Invoke(ctx, SayMethod, in, out, append([]grpc.CallOption{grpc.StaticMethod()}, opts...)...); err != nil {
		return nil, err
	}
	return out, nil
}

// Count calls CountMethod asking for n messages; read them with Recv until
// io.EOF.
func (c *Client) Count(ctx context.Context, n int, opts ...grpc.CallOption) (grpc.ServerStreamingClient[wrapperspb.StringValue], error) {
	stream, err := c.cc.NewStream(ctx, &ServiceDesc.Streams[0], CountMethod, append([]grpc.CallOption{grpc.StaticMethod()}, opts...)...)
	if err != nil {
		return nil, err
	}
	x := &grpc.GenericClientStream[wrapperspb.StringValue, wrapperspb.StringValue]{ClientStream: stream}
	if err := x.ClientStream.SendMsg(wrapperspb.String(strconv.Itoa(n))); err != nil {
		return nil, err
	}
	if err := x.ClientStream.CloseSend(); err != nil {
		return nil, err
	}
	return x, nil
}

// Chat opens a ChatMethod stream: every message sent is received back.
// Call CloseSend when done and read until io.EOF.
func (c *Client) Chat(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[wrapperspb.StringValue, wrapperspb.StringValue], error) {
	stream, err := c.cc.NewStream(ctx, &ServiceDesc.Streams[1], ChatMethod, append([]grpc.CallOption{grpc.StaticMethod()}, opts...)...)
	if err != nil {
		return nil, err
	}
	return &grpc.GenericClientStream[wrapperspb.StringValue, wrapperspb.StringValue]{ClientStream: stream}, nil
}
