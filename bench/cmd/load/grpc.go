package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
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
		{name: "tollgate interceptor", interceptors: func(m *measurer) ([]grpc.UnaryServerInterceptor, func(), error) {
			c := redis.NewClient(cloneOptions(m.opts))
			st := store.NewRedis(c, store.WithPrefix(prefix()), store.WithDenyCache(store.DefaultDenyCacheSize))
			lim, err := interceptor.New(st, interceptor.WithRules(interceptor.Rule{
				Name: "per-tenant", Key: keyfunc.Metadata(bench.TenantHeader), Limit: limit,
			}))
			if err != nil {
				_ = c.Close()
				return nil, nil, err
			}
			return []grpc.UnaryServerInterceptor{lim.UnaryServerInterceptor()}, func() { _ = c.Close() }, nil
		}},
	}
}

// grpcCell serves echo behind srv's interceptors on bufconn and calls Say
// from grpcCallers goroutines for m.cfg.d, each call with a random tenant.
func (m *measurer) grpcCell(ctx context.Context, srv server, tenants []string) (*sample, error) {
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
	if err := m.admin.ConfigResetStat(ctx).Err(); err != nil {
		return nil, err
	}
	hists := make([]bench.Histogram, grpcCallers)
	var ops, failures atomic.Int64
	var firstErr atomic.Value
	stop := time.Now().Add(m.cfg.d)
	start := time.Now()
	var wg sync.WaitGroup
	for g := range grpcCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			msg := wrapperspb.String("hello")
			var n int64
			for {
				t0 := time.Now()
				if t0.After(stop) {
					break
				}
				cctx := metadata.AppendToOutgoingContext(ctx, bench.TenantHeader, tenants[r.IntN(len(tenants))])
				if _, err := client.Say(cctx, msg); err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				hists[g].Record(time.Since(t0))
				n++
			}
			ops.Add(n)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	s := &sample{ops: ops.Load(), errors: failures.Load()}
	for i := range hists {
		s.hist.Merge(&hists[i])
	}
	if s.errors > 0 {
		fmt.Fprintf(os.Stderr, "load: %s: %d of %d calls failed, first: %v\n", srv.name, s.errors, s.errors+s.ops, firstErr.Load())
	}
	s.perSec = float64(s.ops) / elapsed.Seconds()
	stats, err := bench.CommandStats(ctx, m.admin)
	if err != nil {
		return nil, err
	}
	s.scripts = bench.ScriptCalls(stats)
	if s.scripts.Calls > 0 {
		s.usPerScript = float64(s.scripts.Usec) / float64(s.scripts.Calls)
	}
	if s.ops > 0 {
		s.scriptsPerOp = float64(s.scripts.Calls) / float64(s.ops)
	}
	return s, nil
}

func (m *measurer) grpcSection(ctx context.Context) ([]row, error) {
	tenants := make([]string, m.cfg.identities)
	for i := range tenants {
		tenants[i] = "tenant-" + strconv.Itoa(i)
	}
	servers := grpcServers()
	subjects := make([]subject, len(servers))
	for i, s := range servers {
		subjects[i] = subject{name: s.name, reference: s.reference}
	}
	rows, err := m.compare(ctx, "grpc", "random", grpcCallers, subjects, func(s subject) (*sample, error) {
		for _, srv := range servers {
			if srv.name == s.name {
				return m.grpcCell(ctx, srv, tenants)
			}
		}
		return nil, fmt.Errorf("no server %q", s.name)
	})
	fmt.Fprintln(os.Stderr, "load: grpc done")
	return rows, err
}
