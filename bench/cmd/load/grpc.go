package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/bench"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// grpcCallers is the concurrency of the gRPC cells.
const grpcCallers = 64

// server is one echo server on bufconn with some limiter in front.
type server struct {
	name      string
	reference bool
	// interceptors returns the unary interceptors to install and a function
	// releasing what they hold.
	interceptors func(m *measurer) ([]grpc.UnaryServerInterceptor, func(), error)
}

func grpcServers() []server {
	limit := storeLimit(tollgate.GCRA)
	return []server{
		{name: "no limiter", reference: true, interceptors: func(*measurer) ([]grpc.UnaryServerInterceptor, func(), error) {
			return nil, func() {}, nil
		}},
		{name: "ratelimit + redis_rate", interceptors: func(m *measurer) ([]grpc.UnaryServerInterceptor, func(), error) {
			c := redis.NewClient(cloneOptions(m.opts))
			l := bench.RedisRateMiddleware{Limiter: redis_rate.NewLimiter(c), Rate: bench.RedisRateLimit(limit), Prefix: prefix()}
			return []grpc.UnaryServerInterceptor{ratelimit.UnaryServerInterceptor(l)}, func() { _ = c.Close() }, nil
		}},
		redisServer("tollgate interceptor"),
		memoryServer("tollgate interceptor, Memory store"),
	}
}

// redisServer is tollgate's interceptor on its Redis store, with opts.
func redisServer(name string, opts ...interceptor.Option) server {
	return server{name: name, interceptors: func(m *measurer) ([]grpc.UnaryServerInterceptor, func(), error) {
		c := redis.NewClient(cloneOptions(m.opts))
		st, err := redisStore(c, store.WithPrefix(prefix()), store.WithDenyCache(4096))
		if err != nil {
			return nil, nil, err
		}
		lim, err := interceptor.New(st, append(opts, interceptor.WithRules(interceptor.Rule{
			Name: "per-tenant", Key: keyfunc.Metadata(bench.TenantHeader), Limits: interceptor.Fixed(storeLimit(tollgate.GCRA)),
		}))...)
		if err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		return []grpc.UnaryServerInterceptor{lim.UnaryServerInterceptor()}, func() { closeLimiter(lim); _ = c.Close() }, nil
	}}
}

// closeLimiter ends lim's goroutines (its overrides watch), bounded.
func closeLimiter(lim *interceptor.Limiter) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = lim.Close(ctx)
}

// memoryServer is tollgate's interceptor on its in-process Memory store,
// with opts: the interceptor's and gRPC's share of the cost, without
// Redis's.
func memoryServer(name string, opts ...interceptor.Option) server {
	return server{name: name, interceptors: func(m *measurer) ([]grpc.UnaryServerInterceptor, func(), error) {
		st, err := store.NewMemory()
		if err != nil {
			return nil, nil, err
		}
		lim, err := interceptor.New(st, append(opts, interceptor.WithRules(interceptor.Rule{
			Name: "per-tenant", Key: keyfunc.Metadata(bench.TenantHeader), Limits: interceptor.Fixed(storeLimit(tollgate.GCRA)),
		}))...)
		if err != nil {
			return nil, nil, err
		}
		return []grpc.UnaryServerInterceptor{lim.UnaryServerInterceptor()}, func() { closeLimiter(lim) }, nil
	}}
}

// grpcVariants are the rows -variants adds: both stores with the
// rate-limit trailers on admitted calls.
func grpcVariants() []server {
	return []server{
		redisServer("tollgate interceptor, admitted trailers", interceptor.WithAdmittedTrailers()),
		memoryServer("tollgate interceptor, Memory store, admitted trailers", interceptor.WithAdmittedTrailers()),
	}
}

// grpcCell serves echo behind srv's interceptors on bufconn and calls Say
// from callers goroutines for m.cfg.d, each call with a random tenant.
func (m *measurer) grpcCell(ctx context.Context, srv server, tenants []string, callers int) (*sample, error) {
	ints, release, err := srv.interceptors(m)
	if err != nil {
		return nil, err
	}
	defer release()
	client, stopEcho, err := bench.Echo(ints...)
	if err != nil {
		return nil, err
	}
	defer stopEcho()
	// One call before timing: connection set-up, script loading.
	if _, err := client.Say(metadata.AppendToOutgoingContext(ctx, bench.TenantHeader, "warm-up"), wrapperspb.String("hi")); err != nil {
		return nil, fmt.Errorf("warm-up call: %w", err)
	}
	msg := wrapperspb.String("hello")
	return m.run(ctx, callers, func(r *rand.Rand) error {
		cctx := metadata.AppendToOutgoingContext(ctx, bench.TenantHeader, tenants[r.IntN(len(tenants))])
		_, err := client.Say(cctx, msg)
		return err
	})
}

func (m *measurer) grpcSection(ctx context.Context) ([]row, error) {
	tenants := make([]string, m.cfg.identities)
	for i := range tenants {
		tenants[i] = "tenant-" + strconv.Itoa(i)
	}
	servers := grpcServers()
	if m.cfg.variants {
		servers = append(servers, grpcVariants()...)
	}
	rows, err := m.compareServers(ctx, "grpc", servers, tenants, grpcCallers)
	fmt.Fprintln(os.Stderr, "load: grpc done")
	return rows, err
}

// compareServers measures servers beside each other, as the cells of one
// table of section: callers goroutines calling echo behind each server's
// interceptors, each call with a random tenant of tenants.
func (m *measurer) compareServers(ctx context.Context, section string, servers []server, tenants []string, callers int) ([]row, error) {
	subjects := make([]subject, len(servers))
	for i, s := range servers {
		subjects[i] = subject{name: s.name, reference: s.reference}
	}
	return m.compare(ctx, section, "random", callers, subjects, func(s subject) (*sample, error) {
		for _, srv := range servers {
			if srv.name == s.name {
				return m.grpcCell(ctx, srv, tenants, callers)
			}
		}
		return nil, fmt.Errorf("no server %q", s.name)
	})
}
