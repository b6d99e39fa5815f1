package rlqs_test

import (
	"context"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lease"
	"github.com/tollgate/tollgate/rlqs"
	"github.com/tollgate/tollgate/rls"
	"github.com/tollgate/tollgate/store"
)

// benchModes are the stores BenchmarkReplicas compares: all of them, or
// those TOLLGATE_BENCH_STORES names (comma-separated), in its order, so
// that runs can alternate which goes first.
func benchModes() []string {
	if v := os.Getenv("TOLLGATE_BENCH_STORES"); v != "" {
		return strings.Split(v, ",")
	}
	return []string{"memory", "redis", "lease", "rlqs"}
}

// BenchmarkReplicas makes gRPC calls on 4 replicas, 64 callers each, on
// one tenant, every call admitted: each replica's Limiter over its own
// store.Memory (the anchor: a decision in process), over the Redis store
// (a decision per call), over the local tier on it (lease), or over an
// rlqs.Client deciding from a tollgate-rls assignment (the quota server on
// the same Redis). calls/s and Redis scripts/op are the figures.
func BenchmarkReplicas(b *testing.B) {
	const replicas, callers = 4, 64
	high := strings.Replace(quotaConfig, "requests_per_unit: 100}", "requests_per_unit: 100000000}", 1)
	rule := perTenant(interceptor.FailClosed)
	rule.Limits = interceptor.Fixed(tollgate.PerSecond(100_000_000))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "acme")
	setups := map[string][]*echo.Client{}
	srv := redistest.Single(b)
	prefix := redistest.KeyPrefix(b)
	modes := benchModes()
	for _, mode := range modes {
		var quota *grpc.ClientConn
		if mode == "rlqs" {
			quota = quotaServerOf(b, newRedis(b, srv.Client(b), store.WithPrefix(prefix)), high, rls.QuotaOptions{})
		}
		for range replicas {
			var st tollgate.Store
			switch mode {
			case "memory":
				st = newMemory(b)
			case "redis":
				st = newRedis(b, srv.Client(b), store.WithPrefix(prefix))
			case "lease":
				tier, err := lease.New(newRedis(b, srv.Client(b), store.WithPrefix(prefix)))
				if err != nil {
					b.Fatal(err)
				}
				st = tier
			case "rlqs":
				st = newClient(b, quota, rlqs.Options{})
			}
			setups[mode] = append(setups[mode], replica(b, st, rule))
		}
		// Two seconds of calls, so that every replica's demand is known
		// and its share assigned: refusals and calls without an
		// assignment yet are part of it.
		var wg sync.WaitGroup
		for _, s := range setups[mode] {
			wg.Go(func() {
				for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
					if _, err := s.Say(ctx, wrapperspb.String("hi")); err != nil && status.Code(err) != codes.ResourceExhausted && status.Code(err) != codes.Unavailable {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	for _, mode := range modes {
		b.Run("store="+mode, func(b *testing.B) {
			svcs := setups[mode]
			var next atomic.Int64
			var denied atomic.Int64
			b.SetParallelism(max(1, replicas*callers/runtime.GOMAXPROCS(0)))
			scripts := scriptCalls(b, srv)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				svc := svcs[next.Add(1)%replicas]
				msg := wrapperspb.String("hi")
				for pb.Next() {
					_, err := svc.Say(ctx, msg)
					if status.Code(err) == codes.ResourceExhausted {
						denied.Add(1)
					} else if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
			b.ReportMetric(float64(denied.Load())/float64(b.N), "denied/op")
			b.ReportMetric(float64(scriptCalls(b, srv)-scripts)/float64(b.N), "scripts/op")
		})
	}
}

// BenchmarkAllow decides one tenant's requests from 64 goroutines per
// core: store.Memory (the anchor) against the Client's local decision
// from its assignment.
func BenchmarkAllow(b *testing.B) {
	high := strings.Replace(quotaConfig, "requests_per_unit: 100}", "requests_per_unit: 100000000}", 1)
	c := newClient(b, quotaServerOf(b, newMemory(b), high, rls.QuotaOptions{}), rlqs.Options{})
	req := tollgate.Request{Key: "per-tenant\x00ck:acme", Limit: tollgate.PerSecond(100_000_000)}
	for name, st := range map[string]tollgate.Store{"memory": newMemory(b), "rlqs": c} {
		if _, err := st.Allow(context.Background(), req); err != nil {
			b.Fatal(err)
		}
		b.Run("store="+name, func(b *testing.B) {
			b.SetParallelism(64)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := st.Allow(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
