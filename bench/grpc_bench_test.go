package bench

import (
	"context"
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// BenchmarkGRPC measures unary echo calls over bufconn from 64 goroutines
// on random tenants, with no limiter, with go-grpc-middleware's ratelimit
// interceptor on redis_rate, and with tollgate's interceptor on its Redis
// store: the hot path of a limited server, transport included.
func BenchmarkGRPC(b *testing.B) {
	limit := generous(tollgate.GCRA)
	for _, s := range []struct {
		name         string
		interceptors func(b *testing.B) []grpc.UnaryServerInterceptor
	}{
		{"no-limiter", func(*testing.B) []grpc.UnaryServerInterceptor { return nil }},
		{"ratelimit+redis_rate", func(b *testing.B) []grpc.UnaryServerInterceptor {
			l := RedisRateMiddleware{Limiter: redis_rate.NewLimiter(newClient(b)), Rate: RedisRateLimit(limit), Prefix: runPrefix("grpc")}
			return []grpc.UnaryServerInterceptor{ratelimit.UnaryServerInterceptor(l)}
		}},
		{"tollgate", func(b *testing.B) []grpc.UnaryServerInterceptor {
			lim, err := interceptor.New(newRedis(b, newClient(b), store.WithPrefix(runPrefix("grpc"))),
				interceptor.WithRules(interceptor.Rule{Name: "per-tenant", Key: keyfunc.Metadata(TenantHeader), Limits: interceptor.Fixed(limit)}))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = lim.Close(context.Background()) })
			return []grpc.UnaryServerInterceptor{lim.UnaryServerInterceptor()}
		}},
	} {
		b.Run(s.name, func(b *testing.B) { benchmarkEcho(b, s.interceptors(b)) })
	}
}

// BenchmarkGRPCMemory is BenchmarkGRPC with tollgate's interceptor on the
// Memory store: the interceptor's and gRPC's share of a limited call,
// without Redis's. "admitted-trailers" sends the x-ratelimit-* trailers on
// admitted calls too (interceptor.WithAdmittedTrailers).
func BenchmarkGRPCMemory(b *testing.B) {
	memory := func(opts ...interceptor.Option) func(b *testing.B) []grpc.UnaryServerInterceptor {
		return func(b *testing.B) []grpc.UnaryServerInterceptor {
			lim, err := interceptor.New(newMemory(b), append(opts, interceptor.WithRules(interceptor.Rule{
				Name: "per-tenant", Key: keyfunc.Metadata(TenantHeader), Limits: interceptor.Fixed(generous(tollgate.GCRA)),
			}))...)
			if err != nil {
				b.Fatal(err)
			}
			return []grpc.UnaryServerInterceptor{lim.UnaryServerInterceptor()}
		}
	}
	b.Run("no-limiter", func(b *testing.B) { benchmarkEcho(b, nil) })
	b.Run("tollgate", func(b *testing.B) { benchmarkEcho(b, memory()(b)) })
	b.Run("tollgate-admitted-trailers", func(b *testing.B) {
		benchmarkEcho(b, memory(interceptor.WithAdmittedTrailers())(b))
	})
}

// benchmarkEcho calls Say over bufconn behind interceptors from 64
// goroutines on random tenants.
func benchmarkEcho(b *testing.B, interceptors []grpc.UnaryServerInterceptor) {
	client, stop, err := Echo(interceptors...)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	tenants := make([]context.Context, benchIdentities)
	for i := range tenants {
		tenants[i] = metadata.AppendToOutgoingContext(context.Background(), TenantHeader, "tenant-"+strconv.Itoa(i))
	}
	msg := wrapperspb.String("hello")
	b.ReportAllocs()
	b.SetParallelism(32) // 64 goroutines on 2 cores
	cpu := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := client.Say(tenants[rand.IntN(len(tenants))], msg); err != nil {
				b.Error(err)
				return
			}
		}
	})
	// CPU time per call, client and server together: on a shared machine
	// it moves far less than ns/op, which other processes' load inflates.
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// processCPU returns the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
