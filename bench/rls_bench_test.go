package bench

import (
	"context"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tollgate/tollgate/rls"
	"github.com/tollgate/tollgate/store"
)

// rlsCallers is how many goroutines call ShouldRateLimit at once.
const rlsCallers = 64

// rlsReps is how many times each subject runs, alternating.
const rlsReps = 5

// rlsLimit is high enough that no call of the measurement is refused: the
// admit path, with its write, is what is measured.
const rlsLimit = 1_000_000

// BenchmarkShouldRateLimit measures ShouldRateLimit calls/s from 64 callers
// over 10k identities, through gRPC on bufconn with go-control-plane's
// client, for rls.Server on store.Redis and for envoyproxy/ratelimit's
// approach (FixedWindowRLS: INCRBY and EXPIRE in one pipeline) on the same
// Redis. The two alternate rlsReps times in one run; compare medians:
//
//	go test -run '^$' -bench ShouldRateLimit -benchtime 3s .
func BenchmarkShouldRateLimit(b *testing.B) {
	ids := identities(benchIdentities)
	subjects := []struct {
		name string
		make func(b *testing.B) pb.RateLimitServiceServer
	}{
		{"tollgate-rls", func(b *testing.B) pb.RateLimitServiceServer {
			cfg, err := rls.ParseConfig(rls.File{Name: "bench.yaml", Data: []byte(
				"domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: " + strconv.Itoa(rlsLimit) + "}\n")})
			if err != nil {
				b.Fatal(err)
			}
			// The baseline waits for Redis as long as Redis takes; so does
			// this server here (1s), rather than failing a call slowed by a
			// busy machine after 50ms.
			srv, err := rls.NewServer(newRedis(b, newClient(b), store.WithPrefix(runPrefix(b.Name()))),
				rls.Options{Config: cfg, StoreTimeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			return srv
		}},
		{"envoyproxy-ratelimit", func(b *testing.B) pb.RateLimitServiceServer {
			return &FixedWindowRLS{Client: newClient(b), Prefix: runPrefix(b.Name()), Limit: rlsLimit, Unit: time.Minute}
		}},
	}
	// The subjects alternate, rep by rep, so that a slow minute of a
	// shared machine falls on both.
	for rep := range rlsReps {
		for _, s := range subjects {
			b.Run(s.name+"/rep="+strconv.Itoa(rep+1), func(b *testing.B) { benchRLS(b, ids, s.make(b)) })
		}
	}
}

// benchRLS runs one rep of one subject.
func benchRLS(b *testing.B, ids []string, srv pb.RateLimitServiceServer) {
	client := serveRLS(b, srv)
	var refused, failed atomic.Int64
	b.SetParallelism(max(1, rlsCallers/runtime.GOMAXPROCS(0))) // 64 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(p *testing.PB) {
		i := rand.IntN(len(ids))
		for p.Next() {
			i = (i + 1) % len(ids)
			resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{
				Domain:      "bench",
				Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: ids[i]}}}},
			})
			switch {
			case err != nil:
				failed.Add(1)
			case resp.OverallCode != pb.RateLimitResponse_OK:
				refused.Add(1)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	if failed.Load() > 0 || refused.Load() > 0 {
		b.Fatalf("%d calls failed and %d were refused: the measurement would not compare like with like", failed.Load(), refused.Load())
	}
}

// serveRLS serves srv on bufconn for the benchmark and returns a client.
func serveRLS(b *testing.B, srv pb.RateLimitServiceServer) pb.RateLimitServiceClient {
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(gs, srv)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cc.Close()
		gs.Stop()
		<-served
	})
	return pb.NewRateLimitServiceClient(cc)
}
