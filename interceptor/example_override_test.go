package interceptor_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// An override raises one tenant's limit and a block refuses another, on
// every Limiter sharing the store; Peek shows what is in force for each.
func ExampleLimiter_Block() {
	st, err := store.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := interceptor.New(st, interceptor.WithRules(interceptor.Rule{
		Name:   "per-tenant",
		Key:    keyfunc.Metadata("x-tenant"),
		Limits: interceptor.Fixed(tollgate.PerHour(100)),
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close(context.Background())
	ctx := context.Background()
	if err := limiter.SetOverride(ctx, "per-tenant", interceptor.Caller{Value: "vip"}, []tollgate.Limit{tollgate.PerHour(1000)}, time.Hour); err != nil {
		log.Fatal(err)
	}
	if err := limiter.Block(ctx, "per-tenant", interceptor.Caller{Value: "abuser"}, 0); err != nil {
		log.Fatal(err)
	}
	unary := limiter.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/shop.Orders/Create"}
	ok := func(context.Context, any) (any, error) { return "ok", nil }
	for _, tenant := range []string{"vip", "abuser"} {
		_, err := unary(metadata.NewIncomingContext(ctx, metadata.Pairs("x-tenant", tenant)), nil, info, ok)
		fmt.Printf("%s: %s\n", tenant, status.Code(err))
	}
	for _, tenant := range []string{"vip", "abuser"} {
		quotas, err := limiter.Peek(ctx, "per-tenant", interceptor.Caller{Value: tenant})
		if err != nil {
			log.Fatal(err)
		}
		for _, q := range quotas {
			if q.Blocked {
				fmt.Printf("%s: blocked, allowed %t\n", tenant, q.Decision.Allowed)
				continue
			}
			fmt.Printf("%s: override %t, %s, %d left\n", tenant, q.Override, q.Limit, q.Available)
		}
	}
	// Output:
	// vip: OK
	// abuser: PermissionDenied
	// vip: override true, token_bucket 1000/1h0m0s burst 1000, 999 left
	// abuser: blocked, allowed false
}
