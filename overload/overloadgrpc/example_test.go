package overloadgrpc_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/overload"
	"github.com/tollgate/tollgate/overload/overloadgrpc"
)

// A server protected by an overload.Limiter, and a client that sends its
// calls' criticality and throttles itself when refused.
func ExampleServer_Options() {
	l, err := overload.New(overload.Options{})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(overloadgrpc.NewServer(l, overloadgrpc.TenantHeader("x-tenant")).Options()...)
	echo.Register(srv, &echo.Server{})
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	th, err := overload.NewThrottle(overload.ThrottleOptions{})
	if err != nil {
		panic(err)
	}
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(overloadgrpc.UnaryClientInterceptor(overloadgrpc.WithThrottle(th))))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	ctx := overload.WithCriticality(context.Background(), overload.CriticalPlus)
	out, err := echo.NewClient(cc).Say(ctx, wrapperspb.String("hello"))
	fmt.Println(out.GetValue(), err, l.Stats().Admitted[overload.CriticalPlus])
	// Output: hello <nil> 1
}
