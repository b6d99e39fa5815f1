package admin_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/admin"
	adminv1 "github.com/tollgate/tollgate/admin/v1"
	"github.com/tollgate/tollgate/engine"
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
	lim, err := engine.New(st, engine.Config{Rules: []engine.Rule{{
		Name:   "per-tenant",
		Key:    keyfunc.Metadata("x-tenant"),
		Limits: engine.Fixed(tollgate.PerSecond(10), tollgate.Daily(1000)),
	}}})
	if err != nil {
		panic(err)
	}
	srv, err := admin.NewServer(lim)
	if err != nil {
		panic(err)
	}
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
	fmt.Println(status.Code(err), status.Convert(err).Message())
	// Output:
	// per-tenant [token_bucket 10/1s burst 10 daily 1000] open
	// token_bucket 10/1s burst 10 available 10
	// daily 1000 available 1000
	// NotFound engine: no rate limit rule is named "no-such-rule"
}

// An operator's program calls the admin service of a running server with
// the generated client, as grpcurl does: here over an in-memory listener,
// in production over the admin listener, with credentials. It lists the
// rules, blocks a tenant for ten minutes, lists the blocks and lifts it.
func ExampleRegister() {
	st, err := store.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	lim, err := engine.New(st, engine.Config{Rules: []engine.Rule{{
		Name:   "per-tenant",
		Key:    keyfunc.Metadata("x-tenant"),
		Limits: engine.Fixed(tollgate.PerSecond(10)),
	}}})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())

	// The server side: the admin service on a listener of its own.
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	if err := admin.Register(srv, lim); err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	// The client side.
	cc, err := grpc.NewClient("passthrough:///admin",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	client := adminv1.NewAdminClient(cc)
	ctx := context.Background()

	rules, err := client.ListRules(ctx, &adminv1.ListRulesRequest{})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range rules.GetRules() {
		fmt.Println("rule", r.GetName(), r.GetLimits())
	}
	abuser := &adminv1.Caller{Identity: &adminv1.Caller_Value{Value: "abuser"}}
	if _, err := client.Block(ctx, &adminv1.BlockRequest{Rule: "per-tenant", Caller: abuser, Ttl: durationpb.New(10 * time.Minute)}); err != nil {
		log.Fatal(err)
	}
	overrides, err := client.ListOverrides(ctx, &adminv1.ListOverridesRequest{Rule: "per-tenant"})
	if err != nil {
		log.Fatal(err)
	}
	for _, o := range overrides.GetOverrides() {
		fmt.Println("blocked", o.GetCaller().GetValue(), o.GetBlocked())
	}
	if _, err := client.DeleteOverride(ctx, &adminv1.DeleteOverrideRequest{Rule: "per-tenant", Caller: abuser}); err != nil {
		log.Fatal(err)
	}
	overrides, err = client.ListOverrides(ctx, &adminv1.ListOverridesRequest{Rule: "per-tenant"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("overrides left", len(overrides.GetOverrides()))
	// Output:
	// rule per-tenant [token_bucket 10/1s burst 10]
	// blocked abuser true
	// overrides left 0
}
