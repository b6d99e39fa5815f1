// Package grpctest runs a gRPC server for a test on an in-memory listener
// and dials it, so that tests exercise real gRPC without opening a port.
package grpctest

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// Serve starts a gRPC server built with serverOpts on a bufconn listener,
// after register has added its services, and returns a client connection to
// it dialled with dialOpts (after an in-memory dialer and insecure
// credentials, which dialOpts may override). When the test ends the
// connection is closed, the server stopped and its Serve goroutine awaited,
// so no goroutine outlives the test; an error from Serve fails the test.
func Serve(t testing.TB, register func(*grpc.Server), serverOpts []grpc.ServerOption, dialOpts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer(serverOpts...)
	register(s)
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	dialOpts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, dialOpts...)
	cc, err := grpc.NewClient("passthrough:///bufnet", dialOpts...)
	if err != nil {
		s.Stop()
		<-done
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		s.Stop()
		if err := <-done; err != nil {
			t.Errorf("grpctest: Serve: %v", err)
		}
	})
	return cc
}
