package rls_test

import (
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/rls"
)

// TestQuotaStoreUnanswering pauses Redis (CLIENT PAUSE) under a quota
// server whose store deadline is 100ms: a report is still answered within
// a bounded time; AnswerUnavailable sends no assignment (the data plane keeps its
// own until it expires), AnswerOK sends ALLOW_ALL.
func TestQuotaStoreUnanswering(t *testing.T) {
	for _, tc := range []struct {
		mode rls.StoreFailAnswer
		want func(*rlqspb.RateLimitQuotaResponse) bool
	}{
		{rls.AnswerUnavailable, func(r *rlqspb.RateLimitQuotaResponse) bool { return len(r.GetBucketAction()) == 0 }},
		{rls.AnswerOK, func(r *rlqspb.RateLimitQuotaResponse) bool {
			return len(r.GetBucketAction()) == 1 && r.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL
		}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			cfg, err := rls.ParseConfig(rls.File{Name: "edge.yaml", Data: []byte(quotaConfig)})
			if err != nil {
				t.Fatal(err)
			}
			s, err := rls.NewServer(newRedis(t, srv.Client(t)), rls.Options{Config: cfg, StoreTimeout: 100 * time.Millisecond, BreakerFailures: -1, StoreFailAnswer: tc.mode})
			if err != nil {
				t.Fatal(err)
			}
			clock := fakeclock.New(quotaStart)
			q, err := rls.NewQuotaServer(s, rls.QuotaOptions{Clock: clock.Now, RebalanceInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			c := rlqspb.NewRateLimitQuotaServiceClient(grpctest.Serve(t, func(g *grpc.Server) { rlqspb.RegisterRateLimitQuotaServiceServer(g, q) }, nil))
			p := newPlane(t, c, "edge", map[string]string{"api": "paused"}, 0)
			p.report(clock.Now())
			if p.strategy.GetTokenBucket() == nil {
				t.Fatalf("before the pause: %v, want a token bucket", p.strategy)
			}
			ends := srv.Pause(t, 3*time.Second)
			clock.Advance(time.Second)
			start := time.Now()
			if err := p.stream.Send(&rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(p.bucket.GetBucket(), 5, 0, time.Second)}}); err != nil {
				t.Fatal(err)
			}
			resp, err := p.stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			// Answered while Redis was still paused: by the store's 100ms
			// deadline, not by Redis (no timed bound: a busy machine).
			if time.Now().After(ends) {
				t.Errorf("the report was answered after %s, once the pause had ended, with the store's deadline at 100ms", time.Since(start))
			}
			if !tc.want(resp) {
				t.Errorf("%s with Redis paused: %v", tc.mode, resp)
			}
			srv.AwaitAnswer(t, 5*time.Second)
		})
	}
}
