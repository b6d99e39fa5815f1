package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/rls"
	"github.com/tollgate/tollgate/store"
)

// TestCountOverLimitAnswersAsEnvoyRatelimit runs the real
// envoyproxy/ratelimit server and tollgate's rls.Server (on the Memory
// store and on Redis) side by side: one descriptor of 100 hits an hour, a
// random sequence of hits_addend from 0 (a look) to far past the limit, as
// Envoy's apply_on_stream_done sends a response's tokens. With
// count_over_limit, tollgate's answers (overall code, code, remaining) are
// envoyproxy/ratelimit's, request after request.
func TestCountOverLimitAnswersAsEnvoyRatelimit(t *testing.T) {
	// Both count in hour windows aligned to the epoch: keep the run inside
	// one.
	if left := time.Hour - time.Duration(time.Now().UnixNano())%time.Hour; left < time.Minute {
		time.Sleep(left + time.Second)
	}
	domain := fmt.Sprintf("conformance%d", time.Now().UnixNano())
	file := func(extra string) string {
		return "domain: " + domain + "\n" + extra + "descriptors:\n  - key: tenant\n    rate_limit:\n      unit: hour\n      requests_per_unit: 100\n"
	}
	c := newClient(t)
	envoy, err := StartEnvoyRatelimit(redisOptions.Addr, map[string]string{"tokens.yaml": file("")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(envoy.Close)
	conf, err := rls.ParseConfig(rls.File{Name: "tokens.yaml", Data: []byte(file("tollgate: {count_over_limit: true}\n"))})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(envoy.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	reference := pb.NewRateLimitServiceClient(cc)

	for name, st := range map[string]tollgate.Store{
		"memory": newMemory(t),
		"redis":  newRedis(t, c, store.WithPrefix(fmt.Sprintf("conformance%d:", time.Now().UnixNano()))),
	} {
		t.Run(name, func(t *testing.T) {
			// The answers are compared, not the time they take: a busy machine
			// must not turn a slow store call into a fail-open answer.
			srv, err := rls.NewServer(st, rls.Options{Config: conf, StoreTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(name))))
			tenant := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
			ctx := context.Background()
			for step := range 60 {
				hits := []uint64{0, 1, 1, 3, 10, 25, 0, 60, 150}[rng.IntN(9)]
				req := &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{{
					Entries:    []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}},
					HitsAddend: wrapperspb.UInt64(hits),
				}}}
				want, err := reference.ShouldRateLimit(ctx, req)
				if err != nil {
					t.Fatalf("step %d: envoyproxy/ratelimit: %v", step, err)
				}
				got, err := srv.ShouldRateLimit(ctx, req)
				if err != nil {
					t.Fatalf("step %d: tollgate: %v", step, err)
				}
				w, g := want.GetStatuses()[0], got.GetStatuses()[0]
				if want.GetOverallCode() != got.GetOverallCode() || w.GetCode() != g.GetCode() || w.GetLimitRemaining() != g.GetLimitRemaining() {
					t.Fatalf("step %d, hits %d:\nenvoyproxy/ratelimit %s %s remaining %d\ntollgate            %s %s remaining %d",
						step, hits, want.GetOverallCode(), w.GetCode(), w.GetLimitRemaining(), got.GetOverallCode(), g.GetCode(), g.GetLimitRemaining())
				}
			}
		})
	}
}
