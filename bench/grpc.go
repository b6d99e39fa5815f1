package bench

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/go-redis/redis_rate/v10"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tollgate/tollgate/examples/echo"
)

// TenantHeader is the metadata key the gRPC measurements limit by.
const TenantHeader = "x-tenant"

// RedisRateMiddleware is the go-grpc-middleware ratelimit.Limiter a user
// of that package writes around redis_rate: one bucket per TenantHeader
// value, a call over the limit refused with the middleware's
// ResourceExhausted.
type RedisRateMiddleware struct {
	Limiter *redis_rate.Limiter
	Rate    redis_rate.Limit
	// Prefix starts every bucket's key.
	Prefix string
}

var errNoTenant = errors.New("no " + TenantHeader + " header")

// Limit implements ratelimit.Limiter.
func (r RedisRateMiddleware) Limit(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(TenantHeader)
	if len(v) == 0 {
		return errNoTenant
	}
	res, err := r.Limiter.Allow(ctx, r.Prefix+v[0], r.Rate)
	if err != nil {
		return err
	}
	if res.Allowed == 0 {
		return fmt.Errorf("rate limited: retry after %s", res.RetryAfter)
	}
	return nil
}

// Echo serves examples/echo on an in-memory bufconn listener behind the
// given unary interceptors and returns a client of it and a function that
// stops both.
func Echo(interceptors ...grpc.UnaryServerInterceptor) (*echo.Client, func(), error) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptors...))
	echo.Register(srv, &echo.Server{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	stopServer := func() { srv.Stop(); <-served }
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		stopServer()
		return nil, nil, err
	}
	return echo.NewClient(cc), func() { _ = cc.Close(); stopServer() }, nil
}
