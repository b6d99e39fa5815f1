package interceptor_test

import (
	"context"
	"log"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// A server with the whole chain: otelgrpc's stats handler (whose span is the
// parent of every decision span), recovery, and the limiter behind a
// selector that leaves health checks alone.
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
