package exampleserver

import (
	"context"
	"crypto/subtle"
	"log"
	"net"

	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/admin"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/internal/serving"
	"github.com/tollgate/tollgate/keyfunc"
)

// EnvAdminToken holds the bearer token the admin service (-admin-addr)
// requires in the "authorization" metadata ("Bearer TOKEN").
const EnvAdminToken = "TOLLGATE_ADMIN_TOKEN"

// serveAdmin serves the admin service of the serving Limiter lim on a
// listener of its own at cfg.AdminAddr, behind a bearer-token check, and
// returns the function that stops it. An override set through it applies
// to this server's next call, and to every other replica's within its
// watch's round trip.
// A rotation of its TLS files is logged and counted in mp.
func serveAdmin(lim *engine.Limiter, cfg Config, logger *log.Logger, mp metric.MeterProvider) (stop func(), err error) {
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(requireToken(cfg.AdminToken))}
	if cfg.AdminTLS.Enabled() {
		tc, err := cfg.AdminTLS.Config(serving.ReloadReporter(logger, mp, "admin"))
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	lis, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(opts...)
	if err := admin.Register(srv, lim); err != nil {
		return nil, err
	}
	go func() { _ = srv.Serve(lis) }()
	logger.Printf("admin service (tollgate.admin.v1) on %s (%s), bearer token from %s", lis.Addr(), cfg.AdminTLS.Mode(), EnvAdminToken)
	return srv.Stop, nil
}

// tenantRule is the server's only rule, for its Limiter and the admin
// service's.
func tenantRule(cfg Config) engine.Rule {
	return engine.Rule{
		Name:     RuleName,
		Methods:  []string{echo.AllMethods, HTTPRoute},
		Key:      keyfunc.Metadata(cfg.TenantHeader),
		Limits:   engine.Fixed(cfg.Limit),
		FailMode: cfg.FailMode,
	}
}

// requireToken refuses calls without "authorization: Bearer token".
func requireToken(token string) grpc.UnaryServerInterceptor {
	want := []byte("Bearer " + token)
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		got := metadata.ValueFromIncomingContext(ctx, "authorization")
		if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), want) != 1 {
			return nil, status.Error(codes.Unauthenticated, "admin: a bearer token is required")
		}
		return handler(ctx, req)
	}
}
