package admin_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	adminv1 "github.com/tollgate/tollgate/admin/v1"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/enginetest"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/keyfunc"
)

// Two replicas on one store: TopRefused on either names the callers both
// refused, merged, or its own alone when asked; ListRules says which rule
// is settled; GetQuota says when a caller has its whole quota (never
// seen), and stops saying it once the caller has spent some.
func TestAdminTopRefusedAndMeanings(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			clk := fakeclock.New(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC))
			prefix := redistest.KeyPrefix(t)
			tenant := interceptor.Rule{Name: "tenant " + prefix, Key: keyfunc.Metadata("x-tenant"), Limits: interceptor.Fixed(tollgate.PerHour(1))}
			settled := interceptor.Rule{Name: "settled " + prefix, Methods: []string{"/none.Never/Called"}, Key: keyfunc.Metadata("x-tenant"),
				Limits: interceptor.Fixed(tollgate.PerHour(100)), Settle: interceptor.SettleReported}
			st := newStore(t)
			replica := func(name string) (*echo.Client, adminv1.AdminClient) {
				l, err := interceptor.New(st, interceptor.WithRules(tenant, settled), interceptor.WithStoreTimeout(5*time.Second),
					interceptor.Option(enginetest.Clock(clk)),
					func(c *engine.Config) { c.Refused = engine.RefusedConfig{Replica: name, Publish: 10 * time.Second} })
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close(context.Background()) })
				c := echo.NewClient(grpctest.Serve(t, func(s *grpc.Server) { echo.Register(s, &echo.Server{}) },
					[]grpc.ServerOption{grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor())}))
				return c, adminv1.NewAdminClient(grpctest.Serve(t, func(s *grpc.Server) { mustRegister(t, s, l) }, nil))
			}
			ca, a := replica("a")
			cb, _ := replica("b")
			ctx := context.Background()

			q, err := a.GetQuota(ctx, &adminv1.GetQuotaRequest{Rule: tenant.Name, Caller: &adminv1.Caller{Identity: &adminv1.Caller_Value{Value: "acme"}}})
			if err != nil {
				t.Fatal(err)
			}
			if got := q.GetQuotas()[0]; !got.GetFull() || got.GetAvailable() != 1 {
				t.Errorf("a caller never seen: %v; want full, 1 available", got)
			}
			acme := metadata.AppendToOutgoingContext(ctx, "x-tenant", "acme")
			refused := 0
			for i := range 10 {
				c := ca
				if i%2 == 1 {
					c = cb
				}
				if _, err := c.Say(acme, wrapperspb.String("hi")); status.Code(err) == codes.ResourceExhausted {
					refused++
				}
			}
			if refused != 9 {
				t.Fatalf("%d refused, want 9", refused)
			}
			q, _ = a.GetQuota(ctx, &adminv1.GetQuotaRequest{Rule: tenant.Name, Caller: &adminv1.Caller{Identity: &adminv1.Caller_Value{Value: "acme"}}})
			if got := q.GetQuotas()[0]; got.GetFull() {
				t.Errorf("a caller that spent its quota: %v; want not full", got)
			}

			clk.Advance(10 * time.Second) // both replicas publish
			top, err := a.TopRefused(ctx, &adminv1.TopRefusedRequest{Rule: tenant.Name})
			if err != nil {
				t.Fatal(err)
			}
			if top.GetReplicas() != 2 || top.GetTotal() != 9 || len(top.GetTop()) != 1 || top.GetTop()[0].GetId() != "acme" || top.GetTop()[0].GetCount() != 9 {
				t.Errorf("TopRefused = %v; want acme refused 9 times on 2 replicas", top)
			}
			local, err := a.TopRefused(ctx, &adminv1.TopRefusedRequest{Rule: tenant.Name, Local: true})
			if err != nil {
				t.Fatal(err)
			}
			if local.GetReplicas() != 1 || local.GetTotal() != 4 {
				t.Errorf("TopRefused local = %v; want this replica's 4 refusals", local)
			}
			if _, err := a.TopRefused(ctx, &adminv1.TopRefusedRequest{Rule: "nope"}); status.Code(err) != codes.NotFound {
				t.Errorf("unknown rule: %v, want NotFound", err)
			}
			if _, err := a.TopRefused(ctx, &adminv1.TopRefusedRequest{Rule: tenant.Name, Limit: 1000}); status.Code(err) != codes.InvalidArgument {
				t.Errorf("limit 1000: %v, want InvalidArgument", err)
			}

			rules, err := a.ListRules(ctx, &adminv1.ListRulesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if r := rules.GetRules(); r[0].GetSettled() || !r[1].GetSettled() {
				t.Errorf("ListRules settled: %v, %v; want false, true", r[0].GetSettled(), r[1].GetSettled())
			}
		})
	}
}
