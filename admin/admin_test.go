package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/admin"
	adminv1 "github.com/tollgate/tollgate/admin/v1"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/overload"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// stores returns the stores every test runs on.
func stores() map[string]func(t *testing.T) tollgate.Store {
	return map[string]func(t *testing.T) tollgate.Store{
		"memory": func(t *testing.T) tollgate.Store { return newMemory(t) },
		"single": func(t *testing.T) tollgate.Store { return newRedis(t, redistest.Single(t).Client(t)) },
		"cluster": func(t *testing.T) tollgate.Store {
			c := redis.NewClusterClient(redistest.SharedCluster(t).Options())
			t.Cleanup(func() { _ = c.Close() })
			return newRedis(t, c)
		},
	}
}

// The admin service over bufconn, beside the limited echo service: it lists
// the rules, reads a caller's quota under each way of naming the caller,
// gives a quota back, and refuses unknown rules and unnamed callers.
func TestAdmin(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			prefix := redistest.KeyPrefix(t)
			perTenant := interceptor.Rule{
				Name:   "tenant-method " + prefix,
				Key:    keyfunc.Join(keyfunc.Metadata("x-tenant"), keyfunc.Method()),
				Limits: interceptor.Fixed(tollgate.PerMinute(10), tollgate.PerHour(3)),
			}
			perUser := interceptor.Rule{
				Name:         "per-user " + prefix,
				Key:          keyfunc.Metadata("x-user"),
				ShareMissing: true,
				Limits:       interceptor.Fixed(tollgate.PerHour(2)),
				Shadow:       true,
			}
			// A generous store deadline: these tests run beside others under
			// the race detector, and a slow first round trip must not turn
			// into a fail-open.
			l, err := interceptor.New(newStore(t), interceptor.WithRules(perTenant, perUser), interceptor.WithStoreTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close(context.Background()) })
			c := echo.NewClient(grpctest.Serve(t, func(s *grpc.Server) { echo.Register(s, &echo.Server{}) },
				[]grpc.ServerOption{grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor())}))
			a := adminv1.NewAdminClient(grpctest.Serve(t, func(s *grpc.Server) { mustRegister(t, s, l) }, nil))
			ctx := context.Background()

			rules, err := a.ListRules(ctx, &adminv1.ListRulesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if got := rules.GetRules(); len(got) != 2 || got[0].GetName() != perTenant.Name ||
				strings.Join(got[0].GetLimits(), "; ") != "token_bucket 10/1m0s burst 10; token_bucket 3/1h0m0s burst 3" ||
				!got[1].GetShadow() || got[1].GetFailMode() != "open" {
				t.Fatalf("ListRules = %v", rules)
			}

			acme := metadata.AppendToOutgoingContext(ctx, "x-tenant", "acme")
			for range 2 {
				if _, err := c.Say(acme, wrapperspb.String("hi")); err != nil {
					t.Fatal(err)
				}
			}
			for what, who := range map[string]*adminv1.Caller{
				"join":     {Identity: &adminv1.Caller_Join{Join: &adminv1.JoinParts{Values: []string{"acme", echo.SayMethod}}}},
				"metadata": {Identity: &adminv1.Caller_Metadata{Metadata: &adminv1.Metadata{Entries: map[string]string{"x-tenant": "acme"}}}, Method: echo.SayMethod},
				"value":    {Identity: &adminv1.Caller_Value{Value: keyfunc.JoinValues("acme", echo.SayMethod)}},
			} {
				q, err := a.GetQuota(ctx, &adminv1.GetQuotaRequest{Rule: perTenant.Name, Caller: who})
				if err != nil {
					t.Fatalf("GetQuota by %s: %v", what, err)
				}
				if got := q.GetQuotas(); len(got) != 2 || got[0].GetAvailable() != 8 || got[1].GetAvailable() != 1 ||
					!got[1].GetAllowed() || got[1].GetCapacity() != 3 || got[1].GetPeriod().AsDuration().String() != "1h0m0s" {
					t.Fatalf("GetQuota by %s = %v, want 8 of 10 a minute and 1 of 3 an hour", what, q)
				}
			}
			anonymous := &adminv1.Caller{Identity: &adminv1.Caller_Anonymous{Anonymous: true}}
			q, err := a.GetQuota(ctx, &adminv1.GetQuotaRequest{Rule: perUser.Name, Caller: anonymous})
			if err != nil {
				t.Fatal(err)
			}
			if got := q.GetQuotas(); len(got) != 1 || got[0].GetAvailable() != 0 || got[0].GetAllowed() {
				t.Fatalf("anonymous per-user quota = %v, want 0 of 2 left", q)
			}

			if _, err := a.ResetQuota(ctx, &adminv1.ResetQuotaRequest{Rule: perUser.Name, Caller: anonymous}); err != nil {
				t.Fatal(err)
			}
			if q, err = a.GetQuota(ctx, &adminv1.GetQuotaRequest{Rule: perUser.Name, Caller: anonymous}); err != nil || q.GetQuotas()[0].GetAvailable() != 2 {
				t.Fatalf("after ResetQuota: %v, %v; want 2 available", q, err)
			}

			_, err = a.GetQuota(ctx, &adminv1.GetQuotaRequest{Rule: "nope", Caller: anonymous})
			if st, _ := status.FromError(err); st.Code() != codes.NotFound || !strings.Contains(st.Message(), `"nope"`) {
				t.Errorf("unknown rule: %v, want NotFound naming it", err)
			}
			_, err = a.ResetQuota(ctx, &adminv1.ResetQuotaRequest{Rule: perTenant.Name})
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("no caller: %v, want InvalidArgument", err)
			}
			_, err = a.GetQuota(ctx, &adminv1.GetQuotaRequest{Rule: perTenant.Name, Caller: anonymous})
			if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "ShareMissing") {
				t.Errorf("anonymous caller of a rule without one: %v, want InvalidArgument", err)
			}
		})
	}
}

// Overrides through the admin service: one set with a TTL and a block
// apply to the limited service, are listed, and one is deleted; bad ones
// are refused with the status the .proto names.
func TestAdminOverrides(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			r := interceptor.Rule{
				Name:   "per-tenant " + redistest.KeyPrefix(t),
				Key:    keyfunc.Metadata("x-tenant"),
				Limits: interceptor.Fixed(tollgate.PerHour(1)),
			}
			l, err := interceptor.New(newStore(t), interceptor.WithRules(r), interceptor.WithStoreTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close(context.Background()) })
			c := echo.NewClient(grpctest.Serve(t, func(s *grpc.Server) { echo.Register(s, &echo.Server{}) },
				[]grpc.ServerOption{grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor())}))
			a := adminv1.NewAdminClient(grpctest.Serve(t, func(s *grpc.Server) { mustRegister(t, s, l) }, nil))
			ctx := context.Background()
			value := func(v string) *adminv1.Caller { return &adminv1.Caller{Identity: &adminv1.Caller_Value{Value: v}} }

			if _, err := a.SetOverride(ctx, &adminv1.SetOverrideRequest{Rule: r.Name, Caller: value("vip"),
				Limits: []*adminv1.Limit{{Rate: 3, Period: durationpb.New(time.Hour)}}, Ttl: durationpb.New(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Block(ctx, &adminv1.BlockRequest{Rule: r.Name, Caller: value("abuser")}); err != nil {
				t.Fatal(err)
			}
			vip := metadata.AppendToOutgoingContext(ctx, "x-tenant", "vip")
			for i := range 3 {
				if _, err := c.Say(vip, wrapperspb.String("hi")); err != nil {
					t.Fatalf("vip call %d under its override of 3 an hour: %v", i+1, err)
				}
			}
			if _, err := c.Say(vip, wrapperspb.String("hi")); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("vip's 4th call: %v, want ResourceExhausted", err)
			}
			abuser := metadata.AppendToOutgoingContext(ctx, "x-tenant", "abuser")
			if _, err := c.Say(abuser, wrapperspb.String("hi")); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("blocked caller: %v, want PermissionDenied", err)
			}
			list, err := a.ListOverrides(ctx, &adminv1.ListOverridesRequest{Rule: r.Name})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, o := range list.GetOverrides() {
				got[o.GetCaller().GetValue()] = strings.Join(o.GetDescribed(), ";")
				if o.GetCaller().GetValue() == "vip" && (o.GetExpiresIn().AsDuration() <= 59*time.Minute || len(o.GetLimits()) != 1 || o.GetLimits()[0].GetRate() != 3) {
					t.Errorf("vip's override = %v", o)
				}
			}
			if len(got) != 2 || got["vip"] != "token_bucket 3/1h0m0s burst 3" || got["abuser"] != "" {
				t.Fatalf("ListOverrides = %v", list)
			}
			for _, o := range list.GetOverrides() {
				if o.GetBlocked() != (o.GetCaller().GetValue() == "abuser") {
					t.Errorf("ListOverrides: %v, want only abuser blocked", o)
				}
			}
			q, err := a.GetQuota(ctx, &adminv1.GetQuotaRequest{Rule: r.Name, Caller: value("abuser")})
			if err != nil {
				t.Fatal(err)
			}
			if len(q.GetQuotas()) != 1 || !q.GetQuotas()[0].GetBlocked() || q.GetQuotas()[0].GetAllowed() {
				t.Fatalf("GetQuota of a blocked caller = %v, want one quota, blocked, not allowed", q)
			}
			q, err = a.GetQuota(ctx, &adminv1.GetQuotaRequest{Rule: r.Name, Caller: value("vip")})
			if err != nil {
				t.Fatal(err)
			}
			if vq := q.GetQuotas(); len(vq) != 1 || !vq[0].GetOverride() || vq[0].GetRate() != 3 || vq[0].GetAvailable() != 0 || vq[0].GetExpiresIn() == nil {
				t.Fatalf("GetQuota of vip after 3 calls = %v, want its override of 3 an hour, none available", q)
			}
			if _, err := a.DeleteOverride(ctx, &adminv1.DeleteOverrideRequest{Rule: r.Name, Caller: value("abuser")}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Say(abuser, wrapperspb.String("hi")); err != nil {
				t.Fatalf("after its override was deleted: %v", err)
			}
			for _, bad := range []struct {
				req  *adminv1.SetOverrideRequest
				code codes.Code
			}{
				{&adminv1.SetOverrideRequest{Rule: "nope", Caller: value("x")}, codes.NotFound},
				{&adminv1.SetOverrideRequest{Rule: r.Name, Caller: value("x")}, codes.InvalidArgument}, // no limits
				{&adminv1.SetOverrideRequest{Rule: r.Name, Caller: value("x"), Limits: []*adminv1.Limit{{Algorithm: "leaky", Rate: 1, Period: durationpb.New(time.Second)}}}, codes.InvalidArgument},
				{&adminv1.SetOverrideRequest{Rule: r.Name, Caller: value("x"), Limits: []*adminv1.Limit{{Rate: 0, Period: durationpb.New(time.Second)}}}, codes.InvalidArgument},
				{&adminv1.SetOverrideRequest{Rule: r.Name, Caller: value("x"), Ttl: durationpb.New(-time.Second)}, codes.InvalidArgument},
				{&adminv1.SetOverrideRequest{Rule: r.Name}, codes.InvalidArgument},
			} {
				if _, err := a.SetOverride(ctx, bad.req); status.Code(err) != bad.code {
					t.Errorf("SetOverride(%v) = %v, want %s", bad.req, err, bad.code)
				}
			}
			_, err = a.SetOverride(ctx, &adminv1.SetOverrideRequest{Rule: r.Name, Caller: value("x"), Limits: []*adminv1.Limit{{Algorithm: "leaky", Rate: 1, Period: durationpb.New(time.Second)}}})
			if msg := status.Convert(err).Message(); !strings.Contains(msg, r.Name) || !strings.Contains(msg, `"sliding_window"`) {
				t.Errorf("unknown algorithm: %q, want the rule and the valid names", msg)
			}
			if _, err := a.Block(ctx, &adminv1.BlockRequest{Rule: r.Name, Caller: value("x"), Ttl: durationpb.New(-time.Second)}); status.Code(err) != codes.InvalidArgument {
				t.Errorf("Block with a negative ttl = %v, want InvalidArgument", err)
			}
			if list, err := a.ListOverrides(ctx, &adminv1.ListOverridesRequest{Rule: r.Name}); err != nil || len(list.GetOverrides()) != 1 {
				t.Errorf("ListOverrides after the refused changes = %v, %v; want vip's alone", list, err)
			}
		})
	}
}

// mustRegister registers l's admin service on s.
func mustRegister(t *testing.T, s *grpc.Server, l *interceptor.Limiter) {
	t.Helper()
	if err := admin.Register(s, l.Limiter); err != nil {
		t.Fatal(err)
	}
}

// A nil Limiter, or a nil server to register on, is an error, never a
// panic at the first request.
func TestNilLimiterIsAnError(t *testing.T) {
	if _, err := admin.NewServer(nil); err == nil {
		t.Error("NewServer(nil): no error")
	}
	if err := admin.Register(grpc.NewServer(), nil); err == nil {
		t.Error("Register(s, nil): no error")
	}
	l, err := interceptor.New(newMemory(t), interceptor.WithRules(interceptor.Rule{Name: "r", Key: keyfunc.Method(), Limits: interceptor.Fixed(tollgate.PerSecond(1))}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	if err := admin.Register((*grpc.Server)(nil), l.Limiter); err == nil {
		t.Error("Register(typed nil server, l): no error")
	}
}

// A rule that only bounds calls in flight is described by its seats, as
// Limiter.Peek describes it: GetQuota says how many are held and free, with
// no rate limit, and ListRules gives its InFlight.Max.
func TestAdminInFlightRule(t *testing.T) {
	rule := interceptor.Rule{Name: "exports", Key: keyfunc.Metadata("x-tenant"), InFlight: interceptor.InFlight{Max: 2}}
	l, err := interceptor.New(newMemory(t), interceptor.WithRules(rule))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	started, finish := make(chan struct{}), make(chan struct{})
	c := echo.NewClient(grpctest.Serve(t, func(s *grpc.Server) {
		echo.Register(s, &echo.Server{Before: func(context.Context, string) error {
			started <- struct{}{}
			<-finish
			return nil
		}})
	}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor())}))
	a := adminv1.NewAdminClient(grpctest.Serve(t, func(s *grpc.Server) { mustRegister(t, s, l) }, nil))
	ctx := context.Background()

	done := make(chan error, 1)
	go func() {
		_, err := c.Say(metadata.AppendToOutgoingContext(ctx, "x-tenant", "acme"), wrapperspb.String("hi"))
		done <- err
	}()
	<-started
	q, err := a.GetQuota(ctx, &adminv1.GetQuotaRequest{Rule: "exports", Caller: &adminv1.Caller{Identity: &adminv1.Caller_Value{Value: "acme"}}})
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	want := &adminv1.Quota{InFlight: true, InUse: 1, MaxInFlight: 2, Available: 1, Cost: 1, Allowed: true}
	if got := q.GetQuotas(); len(got) != 1 || !proto.Equal(got[0], want) {
		t.Errorf("GetQuota = %v, want only %v", q, want)
	}
	rules, err := a.ListRules(ctx, &adminv1.ListRulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantRule := &adminv1.Rule{Name: "exports", FailMode: "open", MaxInFlight: 2}
	if got := rules.GetRules(); len(got) != 1 || !proto.Equal(got[0], wantRule) {
		t.Errorf("ListRules = %v, want only %v", rules, wantRule)
	}
}

// A rule with only a limit of its own (Rule.Overload) is listed as such;
// asking for a caller's quota under it is the caller's mistake, said.
func TestAdminOverloadRule(t *testing.T) {
	rule := interceptor.Rule{Name: "reserve", Methods: []string{echo.SayMethod}, Overload: &overload.Options{}}
	l, err := interceptor.New(newMemory(t), interceptor.WithRules(rule))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	a := adminv1.NewAdminClient(grpctest.Serve(t, func(s *grpc.Server) { mustRegister(t, s, l) }, nil))
	ctx := context.Background()
	rules, err := a.ListRules(ctx, &adminv1.ListRulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &adminv1.Rule{Name: "reserve", Methods: []string{echo.SayMethod}, FailMode: "open", Overload: true}
	if got := rules.GetRules(); len(got) != 1 || !proto.Equal(got[0], want) {
		t.Fatalf("ListRules = %v, want only %v", rules, want)
	}
	_, err = a.GetQuota(ctx, &adminv1.GetQuotaRequest{Rule: "reserve", Caller: &adminv1.Caller{Identity: &adminv1.Caller_Value{Value: "acme"}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "only Overload") {
		t.Fatalf("GetQuota on a rule with only Overload: %v, want InvalidArgument saying so", err)
	}
}
