package main

import (
	"context"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/redistest"
)

// TestServesQuotaService: the command serves the rate limit quota service
// on its listener, from the same configuration, on each store the
// environment can name, and reports it healthy.
func TestServesQuotaService(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(t *testing.T) map[string]string
	}{
		{"memory", func(t *testing.T) map[string]string { return nil }},
		{"redis", func(t *testing.T) map[string]string {
			return map[string]string{envRedisURL: "redis://" + redistest.Single(t).Addr()}
		}},
		{"cluster", func(t *testing.T) map[string]string {
			return map[string]string{envRedisClusterAddrs: strings.Join(redistest.SharedCluster(t).Addrs, ",")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			domain := strings.ReplaceAll(redistest.KeyPrefix(t), ":", "_")
			writeFile(t, dir, "shop.yaml", "domain: "+domain+"\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 50}\n")
			cc, _, _ := startCommand(t, tc.env(t), "-config", dir, "-addr", "127.0.0.1:0", "-store-timeout", "5s")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: quotaServiceName}, grpc.WaitForReady(true))
			if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health of %s: %v %v", quotaServiceName, h, err)
			}
			stream, err := rlqspb.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			err = stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
				BucketId: &rlqspb.BucketId{Bucket: map[string]string{"tenant": "acme"}}, NumRequestsAllowed: 1, TimeElapsed: durationpb.New(0),
			}}})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			tb := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
			if tb.GetTokensPerFill().GetValue() != 50 || tb.GetFillInterval().AsDuration() != time.Second {
				t.Fatalf("assignment %v, want the whole 50/s to the only data plane", resp)
			}
		})
	}
}
