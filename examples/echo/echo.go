// Package echo is a tiny gRPC service that the examples and the end-to-end
// tests put behind the rate limiter. It has one method of each shape a limiter
// must handle: unary (Say), server-streaming (Count) and bidirectional
// streaming (Chat). Every message is a google.protobuf.StringValue.
//
// The service is defined in echo.proto; echo.pb.go and echo_grpc.pb.go are
// generated from it (go generate), so the file descriptor is registered and a
// server that registers grpc reflection describes the service to grpcurl and
// to clients in any language. This file adds the default server, Register, a
// Client whose Count takes a number, and the method names as constants.
package echo

//go:generate sh gen.sh

import (
	"context"
	"io"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ServiceName is the fully qualified gRPC service name (Echo_ServiceDesc.ServiceName).
const ServiceName = "tollgate.example.Echo"

// Full method names, as seen by server interceptors in
// grpc.UnaryServerInfo.FullMethod and grpc.StreamServerInfo.FullMethod.
const (
	// SayMethod is the unary method: it answers with the message it received.
	SayMethod = Echo_Say_FullMethodName
	// CountMethod is the server-streaming method: it answers a request whose
	// value is a decimal n with n messages "1", "2", … "n".
	CountMethod = Echo_Count_FullMethodName
	// ChatMethod is the bidirectional method: it answers every message it
	// receives with the same message, until the client closes its side.
	ChatMethod = Echo_Chat_FullMethodName
	// AllMethods is the method pattern that matches every method of the
	// service, in the "/pkg.Service/*" form rate-limit rules accept.
	AllMethods = "/" + ServiceName + "/*"
)

// MaxCount is the largest n Count accepts; a larger one is answered with
// codes.InvalidArgument, so a single request cannot make the server stream
// without end.
const MaxCount = 10000

// Register registers srv as the Echo service on s.
func Register(s grpc.ServiceRegistrar, srv EchoServer) {
	RegisterEchoServer(s, srv)
}

// Server is the default EchoServer. The zero value echoes; set Before to make
// calls fail on demand.
type Server struct {
	UnimplementedEchoServer

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

// Client is a client of the Echo service: the generated EchoClient, with a
// Count that takes the number of messages instead of a request.
type Client struct {
	c EchoClient
}

// NewClient returns a Client that calls the Echo service over cc.
func NewClient(cc grpc.ClientConnInterface) *Client {
	return &Client{c: NewEchoClient(cc)}
}

// Say calls SayMethod.
func (c *Client) Say(ctx context.Context, in *wrapperspb.StringValue, opts ...grpc.CallOption) (*wrapperspb.StringValue, error) {
	return c.c.Say(ctx, in, opts...)
}

// Count calls CountMethod asking for n messages; read them with Recv until
// io.EOF.
func (c *Client) Count(ctx context.Context, n int, opts ...grpc.CallOption) (grpc.ServerStreamingClient[wrapperspb.StringValue], error) {
	return c.c.Count(ctx, wrapperspb.String(strconv.Itoa(n)), opts...)
}

// Chat opens a ChatMethod stream: every message sent is received back.
// Call CloseSend when done and read until io.EOF.
func (c *Client) Chat(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[wrapperspb.StringValue, wrapperspb.StringValue], error) {
	return c.c.Chat(ctx, opts...)
}
