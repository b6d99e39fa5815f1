package interceptor_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// A server with the whole chain: otelgrpc's stats handler (whose span is the
// parent of every decision span), recovery, and the limiter behind a
// selector that leaves health checks alone. Both rules apply to the Orders
// service's calls, all or nothing; other calls meet only per-peer.
func ExampleFor() {
	// ContextTimeoutEnabled lets the limiter's store deadline reach the
	// socket: without it go-redis waits for its own ReadTimeout.
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	st, err := store.NewRedis(rdb)
	if err != nil {
		log.Fatal(err)
	}
	local, err := store.NewMemory() // where FailLocal rules decide while Redis is down
	if err != nil {
		log.Fatal(err)
	}
	eng, err := engine.New(st, engine.Config{ // the decision core every door asks
		Rules: []engine.Rule{
			{
				Name:     "per-tenant",
				Methods:  []string{"/shop.Orders/*"},
				Key:      keyfunc.Metadata("x-tenant"),
				Limits:   engine.Fixed(tollgate.PerSecond(100)),
				FailMode: engine.FailLocal, // each replica caps itself while Redis is down
			},
			{
				Name:         "per-peer",
				Key:          keyfunc.Peer(),
				ShareMissing: true,
				Limits:       engine.Fixed(tollgate.Limit{Algorithm: tollgate.GCRA, Rate: 600, Period: time.Minute, Burst: 50}),
				FailMode:     engine.FailOpen,
			},
		},
		LocalStore:   local,
		Replicas:     40,                    // FailLocal: 100/s across 40 replicas is 3/s each
		StoreTimeout: 50 * time.Millisecond, // the default
	})
	if err != nil {
		log.Fatal(err) // every configuration mistake is reported here, naming the rule
	}
	limiter := interceptor.For(eng) // the gRPC door; httplimit.New(eng) and connectlimit.New(eng) are the others
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
	defer limiter.Close(context.Background()) // stops the watch of live overrides

	_ = srv // register services, then srv.Serve(listener)
}

// A gRPC-only server can build its Limiter here: the options set the
// fields of engine.Config, and any func(*engine.Config) is one.
func ExampleNew() {
	st, err := store.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := interceptor.New(st,
		interceptor.WithRules(interceptor.Rule{
			Name:   "per-tenant",
			Key:    keyfunc.Metadata("x-tenant"),
			Limits: interceptor.Fixed(tollgate.PerSecond(100)),
		}),
		interceptor.WithStoreTimeout(50*time.Millisecond),
		func(c *engine.Config) { c.Logger = slog.Default() },
	)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close(context.Background())
	fmt.Println(len(limiter.Rules()), "rule")
	// Output: 1 rule
}

// Two limits on one tenant, and a rule on trial in shadow: a call is
// admitted only when every enforcing limit admits it, and Peek shows what
// is left without spending it.
func ExampleLimiter_Peek() {
	st, err := store.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := interceptor.New(st, interceptor.WithRules(
		interceptor.Rule{
			Name:   "per-tenant",
			Key:    keyfunc.Metadata("x-tenant"),
			Limits: interceptor.Fixed(tollgate.PerMinute(10), tollgate.PerHour(1000)),
		},
		interceptor.Rule{
			Name:   "stricter-trial",
			Key:    keyfunc.Metadata("x-tenant"),
			Limits: interceptor.Fixed(tollgate.PerHour(2)),
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

// A Limiter on a real gRPC server (over an in-memory bufconn listener, on
// the Memory store): a tenant allowed 2 calls a minute makes 3, and the third
// gets the rich denial every client can read.
func ExampleLimiter_UnaryServerInterceptor() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	mem, err := store.NewMemory(store.WithClock(func() time.Time { return now }))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := interceptor.New(mem, interceptor.WithRules(interceptor.Rule{
		Name:   "per-tenant",
		Key:    keyfunc.Metadata("x-tenant"),
		Limits: interceptor.Fixed(tollgate.PerMinute(2)),
	}), interceptor.WithAdmittedTrailers()) // x-ratelimit-* on admitted calls too, not only on denials
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(limiter.UnaryServerInterceptor()))
	echo.Register(srv, &echo.Server{})
	lis := bufconn.Listen(1 << 20)
	go srv.Serve(lis)
	defer srv.Stop()

	cc, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	client := echo.NewClient(cc)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "acme")

	for i := 1; i <= 3; i++ {
		var trailer metadata.MD
		_, err := client.Say(ctx, wrapperspb.String("hi"), grpc.Trailer(&trailer))
		st := status.Convert(err)
		fmt.Printf("call %d: %v, remaining %v\n", i, st.Code(), trailer.Get("x-ratelimit-remaining"))
		if err == nil {
			continue
		}
		fmt.Println(st.Message())
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Println("RetryInfo:", d.GetRetryDelay().AsDuration())
			case *errdetails.QuotaFailure:
				v := d.GetViolations()[0]
				fmt.Println("QuotaFailure:", v.GetSubject(), v.GetDescription())
			}
		}
		fmt.Println("grpc-retry-pushback-ms:", trailer.Get("grpc-retry-pushback-ms"))
	}
	// Output:
	// call 1: OK, remaining [1]
	// call 2: OK, remaining [0]
	// call 3: ResourceExhausted, remaining [0]
	// rate limit "per-tenant" exceeded: retry after 30s
	// RetryInfo: 30s
	// QuotaFailure: rule:per-tenant token_bucket 2/1m0s burst 2 exceeded; retry after 30s
	// grpc-retry-pushback-ms: [30000]
}
