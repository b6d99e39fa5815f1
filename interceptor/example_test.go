package interceptor_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// A server with the whole chain: otelgrpc's stats handler (whose span is the
// parent of every decision span), recovery, and the limiter behind a
// selector that leaves health checks alone. Both rules apply to the Orders
// service's calls, all or nothing; other calls meet only per-peer.
func ExampleNew() {
	// ContextTimeoutEnabled lets the limiter's store deadline reach the
	// socket: without it go-redis waits for its own ReadTimeout.
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	limiter, err := interceptor.New(store.NewRedis(rdb),
		interceptor.WithRules(
			interceptor.Rule{
				Name:     "per-tenant",
				Methods:  []string{"/shop.Orders/*"},
				Key:      keyfunc.Metadata("x-tenant"),
				Limit:    tollgate.PerSecond(100),
				FailMode: interceptor.FailLocal, // each replica caps itself while Redis is down
			},
			interceptor.Rule{
				Name:         "per-peer",
				Key:          keyfunc.Peer(),
				OnMissingKey: interceptor.ShareMissing,
				Limit:        tollgate.Limit{Algorithm: tollgate.GCRA, Rate: 600, Period: time.Minute, Burst: 50},
				FailMode:     interceptor.FailOpen,
			},
		),
		interceptor.WithReplicas(40),                      // FailLocal: 100/s across 40 replicas is 3/s each
		interceptor.WithStoreTimeout(50*time.Millisecond), // the default
	)
	if err != nil {
		log.Fatal(err) // every configuration mistake is reported here, naming the rule
	}
	notHealth := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return c.Service != healthpb.Health_ServiceDesc.ServiceName
	})
	srv := grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		grpc.ChainUnaryInterceptor(
			recovery.UnaryServerInterceptor(),
			selector.UnaryServerInterceptor(limiter.UnaryServerInterceptor(), notHealth),
		),
		grpc.ChainStreamInterceptor(
			recovery.StreamServerInterceptor(),
			selector.StreamServerInterceptor(limiter.StreamServerInterceptor(), notHealth),
		),
	)
	_ = srv // register services, then srv.Serve(listener)
}

// Two limits on one tenant, and a rule on trial in shadow: a call is
// admitted only when every enforcing limit admits it, and Peek shows what
// is left without spending it.
func ExampleLimiter_Peek() {
	limiter, err := interceptor.New(store.NewMemory(), interceptor.WithRules(
		interceptor.Rule{
			Name:   "per-tenant",
			Key:    keyfunc.Metadata("x-tenant"),
			Limits: []tollgate.Limit{tollgate.PerMinute(10), tollgate.PerHour(1000)},
		},
		interceptor.Rule{
			Name:   "stricter-trial",
			Key:    keyfunc.Metadata("x-tenant"),
			Limit:  tollgate.PerHour(2),
			Shadow: true, // decided and debited, never denies
		},
	))
	if err != nil {
		log.Fatal(err)
	}
	unary := limiter.UnaryServerInterceptor()
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "acme"))
	info := &grpc.UnaryServerInfo{FullMethod: "/shop.Orders/Create"}
	ok := func(context.Context, any) (any, error) { return "ok", nil }
	for range 3 {
		if _, err := unary(ctx, nil, info, ok); err != nil {
			log.Fatal(err)
		}
	}
	for _, rule := range []string{"per-tenant", "stricter-trial"} {
		quotas, err := limiter.Peek(context.Background(), rule, interceptor.Caller{Value: "acme"})
		if err != nil {
			log.Fatal(err)
		}
		for _, q := range quotas {
			fmt.Printf("%s: %s: %d left\n", rule, q.Limit, q.Available)
		}
	}
	// Output:
	// per-tenant: token_bucket 10/1m0s burst 10: 7 left
	// per-tenant: token_bucket 1000/1h0m0s burst 1000: 997 left
	// stricter-trial: token_bucket 2/1h0m0s burst 2: 0 left
}
