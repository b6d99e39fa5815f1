package admin_test

import (
	"context"
	"fmt"
	"log"

	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/admin"
	adminv1 "github.com/tollgate/tollgate/admin/v1"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// An operator looks at a tenant's quota under a rule of two limits, then
// gives it back. In a server, admin.Register serves the same methods on a
// grpc.Server of its own, behind authorization.
func ExampleNewServer() {
	st, err := store.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	lim, err := interceptor.New(st, interceptor.WithRules(interceptor.Rule{
		Name:   "per-tenant",
		Key:    keyfunc.Metadata("x-tenant"),
		Limits: interceptor.Fixed(tollgate.PerSecond(10), tollgate.Daily(1000)),
	}))
	if err != nil {
		panic(err)
	}
	srv := admin.NewServer(lim)
	ctx := context.Background()
	acme := &adminv1.Caller{Identity: &adminv1.Caller_Value{Value: "acme"}}

	rules, _ := srv.ListRules(ctx, &adminv1.ListRulesRequest{})
	for _, r := range rules.Rules {
		fmt.Println(r.Name, r.Limits, r.FailMode)
	}
	q, err := srv.GetQuota(ctx, &adminv1.GetQuotaRequest{Rule: "per-tenant", Caller: acme})
	if err != nil {
		panic(err)
	}
	for _, quota := range q.Quotas {
		fmt.Println(quota.Limit, "available", quota.Available)
	}
	if _, err := srv.ResetQuota(ctx, &adminv1.ResetQuotaRequest{Rule: "per-tenant", Caller: acme}); err != nil {
		panic(err)
	}
	_, err = srv.GetQuota(ctx, &adminv1.GetQuotaRequest{Rule: "no-such-rule", Caller: acme})
	fmt.Println(status.Code(err), err)
	// Output:
	// per-tenant [token_bucket 10/1s burst 10 daily 1000] open
	// token_bucket 10/1s burst 10 available 10
	// daily 1000 available 1000
	// NotFound interceptor: no rate limit rule is named "no-such-rule"
}
