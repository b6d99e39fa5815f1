package idempotency_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/idempotency"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// The client interceptor stamps one request id per logical call, and gRPC's
// own retry (the service config's retryPolicy) sends it again with every
// attempt. The server's handler fails the first attempt after the limiter
// admitted it; the retry is admitted as a replay of that admission, so the
// tenant pays once. The ids here come from a counter to keep the output
// fixed; by default they are random (NewID).
func ExampleUnaryClientInterceptor() {
	st, err := store.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := interceptor.New(st, interceptor.WithRules(interceptor.Rule{
		Name:   "per-tenant",
		Key:    keyfunc.Metadata("x-tenant"),
		Limits: interceptor.Fixed(tollgate.PerMinute(3)),
	}), interceptor.WithAdmittedTrailers()) // x-ratelimit-remaining on admitted calls too
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(limiter.UnaryServerInterceptor()))
	echo.Register(srv, &echo.Server{Before: func(ctx context.Context, _ string) error {
		md, _ := metadata.FromIncomingContext(ctx)
		retried := len(md.Get("grpc-previous-rpc-attempts")) > 0
		fmt.Printf("attempt carries %s=%s, retry: %v\n", idempotency.DefaultHeader, md.Get(idempotency.DefaultHeader)[0], retried)
		if !retried {
			return status.Error(codes.Unavailable, "fails once, after admission")
		}
		return nil
	}})
	lis := bufconn.Listen(1 << 20)
	go srv.Serve(lis)
	defer srv.Stop()

	const retryPolicy = `{"methodConfig": [{"name": [{"service": "tollgate.example.Echo"}], "retryPolicy": {
		"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.1s", "backoffMultiplier": 2,
		"retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	n := 0
	cc, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(retryPolicy),
		grpc.WithChainUnaryInterceptor(idempotency.UnaryClientInterceptor(idempotency.WithGenerator(func() string {
			n++
			return fmt.Sprintf("call-%d", n)
		}))),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "acme")
	var trailer metadata.MD
	_, err = echo.NewClient(cc).Say(ctx, wrapperspb.String("hi"), grpc.Trailer(&trailer))
	fmt.Printf("call: %v, replayed %v, remaining %v\n", status.Code(err), trailer.Get("x-ratelimit-replayed"), trailer.Get("x-ratelimit-remaining"))
	// Output:
	// attempt carries x-request-id=call-1, retry: false
	// attempt carries x-request-id=call-1, retry: true
	// call: OK, replayed [1], remaining [2]
}
