package rls_test

import (
	"context"
	"strconv"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate/tollgate/rls"
)

// BenchmarkShouldRateLimit is the server's own cost per call on the Memory
// store, without gRPC: matching, the plan, one AllowAll and the answer.
func BenchmarkShouldRateLimit(b *testing.B) {
	cfg, err := rls.ParseConfig(rls.File{Name: "b.yaml", Data: []byte("domain: b\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000000}\n")})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := rls.NewServer(newMemory(b), rls.Options{Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*pb.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &pb.RateLimitRequest{Domain: "b", Descriptors: []*rlv3.RateLimitDescriptor{d("user", "u"+strconv.Itoa(i))}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := srv.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}
