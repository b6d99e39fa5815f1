package rlqs_test

import (
	"context"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/rlqs"
	"github.com/tollgate/tollgate/rls"
	"github.com/tollgate/tollgate/store"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// quotaConfig gives the rule "per-tenant" 100 calls a second per tenant,
// shared by every replica, and the rule "blocked" none.
const quotaConfig = `domain: services
descriptors:
  - key: rule
    value: per-tenant
    descriptors:
      - key: key
        rate_limit: {unit: second, requests_per_unit: 100}
  - key: rule
    value: blocked
    descriptors:
      - key: key
        rate_limit: {unit: second, requests_per_unit: 0}
`

// quotaServer serves tollgate-rls's quota service over st and returns a
// connection to it.
func quotaServer(t testing.TB, st tollgate.Store, opts rls.QuotaOptions) *grpc.ClientConn {
	t.Helper()
	return quotaServerOf(t, st, quotaConfig, opts)
}

// quotaServerOf is quotaServer with the configuration config.
func quotaServerOf(t testing.TB, st tollgate.Store, config string, opts rls.QuotaOptions) *grpc.ClientConn {
	t.Helper()
	cfg, err := rls.ParseConfig(rls.File{Name: "services.yaml", Data: []byte(config)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rls.NewServer(st, rls.Options{Config: cfg, StoreTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	q, err := rls.NewQuotaServer(srv, opts)
	if err != nil {
		t.Fatal(err)
	}
	return grpctest.Serve(t, func(s *grpc.Server) { rlqspb.RegisterRateLimitQuotaServiceServer(s, q) }, nil)
}

// newClient returns a Client on conn, closed when the test ends.
func newClient(t testing.TB, conn grpc.ClientConnInterface, opts rlqs.Options) *rlqs.Client {
	t.Helper()
	c, err := rlqs.New(conn, "services", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

// perTenant is the rule the tests limit by: the x-tenant header, 100/s
// (the RLQS server's limit is what applies; this one only shapes the
// telemetry and the per-call fallback).
func perTenant(fail interceptor.FailMode) interceptor.Rule {
	return interceptor.Rule{
		Name:     "per-tenant",
		Methods:  []string{echo.AllMethods},
		Key:      keyfunc.Metadata("x-tenant"),
		Limits:   interceptor.Fixed(tollgate.PerSecond(100)),
		FailMode: fail,
	}
}

// replica serves the echo service behind a Limiter over st and returns
// its client.
func replica(t testing.TB, st tollgate.Store, rules ...interceptor.Rule) *echo.Client {
	t.Helper()
	lim, err := interceptor.New(st, interceptor.WithRules(rules...), interceptor.WithStoreTimeout(5*time.Second), func(c *engine.Config) { c.BreakerFailures, c.BreakerCoolDown = -1, 0 })
	if err != nil {
		t.Fatal(err)
	}
	cc := grpctest.Serve(t, func(s *grpc.Server) { echo.Register(s, &echo.Server{}) }, []grpc.ServerOption{grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor())})
	return echo.NewClient(cc)
}

// stores are the backends the quota server runs on.
func stores(t *testing.T) map[string]func() tollgate.Store {
	prefix := redistest.KeyPrefix(t)
	return map[string]func() tollgate.Store{
		"memory": func() tollgate.Store { return newMemory(t) },
		"redis": func() tollgate.Store {
			return newRedis(t, redistest.Single(t).Client(t), store.WithPrefix(prefix))
		},
		"cluster": func() tollgate.Store {
			return newRedis(t, redistest.SharedCluster(t).Client(t), store.WithPrefix(prefix))
		},
	}
}
