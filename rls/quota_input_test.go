package rls_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/rls"
)

func usage(bucket map[string]string, allowed, denied uint64, elapsed time.Duration) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqspb.BucketId{Bucket: bucket}, NumRequestsAllowed: allowed, NumRequestsDenied: denied, TimeElapsed: durationpb.New(elapsed)}
}

// exchange opens a stream, sends reports and returns the responses, or
// the status the stream ended with.
func exchange(t *testing.T, c rlqspb.RateLimitQuotaServiceClient, reports ...*rlqspb.RateLimitQuotaUsageReports) ([]*rlqspb.RateLimitQuotaResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := c.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*rlqspb.RateLimitQuotaResponse
	for _, r := range reports {
		if err := stream.Send(r); err != nil {
			break // the server ended the stream: Recv says why
		}
		resp, err := stream.Recv()
		if err != nil {
			return out, err
		}
		out = append(out, resp)
	}
	return out, nil
}

// strategyOf returns the strategy assigned to the only bucket of resp.
func strategyOf(t *testing.T, resp *rlqspb.RateLimitQuotaResponse) *typev3.RateLimitStrategy {
	t.Helper()
	if len(resp.GetBucketAction()) != 1 {
		t.Fatalf("%d actions, want 1: %v", len(resp.GetBucketAction()), resp)
	}
	return resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy()
}

// TestQuotaReadsBucketsAsDescriptors: a BucketId's pairs are read in the
// configuration's nesting whatever their order; wildcards match;
// unlimited is ALLOW_ALL, requests_per_unit 0 DENY_ALL, and a bucket no
// descriptor matches, or of an unknown domain, ALLOW_ALL, as the rate
// limit service answers OK to such a descriptor.
func TestQuotaReadsBucketsAsDescriptors(t *testing.T) {
	for _, b := range quotaBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			clock := fakeclock.New(quotaStart)
			c := quotaReplicas(t, b.stores(t, 1, clock), rls.QuotaOptions{Clock: clock.Now, RebalanceInterval: -1})[0]
			allow := typev3.RateLimitStrategy_ALLOW_ALL
			deny := typev3.RateLimitStrategy_DENY_ALL
			cases := []struct {
				name    string
				domain  string
				bucket  map[string]string
				blanket *typev3.RateLimitStrategy_BlanketRule
				tokens  uint32
				fill    time.Duration
			}{
				{name: "one pair", domain: "edge", bucket: map[string]string{"api": "x"}, tokens: 400, fill: time.Second},
				{name: "nested, wildcard", domain: "edge", bucket: map[string]string{"method": "GetUser", "tenant": "acme"}, tokens: 60, fill: time.Minute},
				{name: "nested, key alone", domain: "edge", bucket: map[string]string{"tenant": "acme", "method": "Put"}, tokens: 7, fill: time.Second},
				{name: "unlimited", domain: "edge", bucket: map[string]string{"free": "1"}, blanket: &allow},
				{name: "requests_per_unit 0", domain: "edge", bucket: map[string]string{"blocked": "1"}, blanket: &deny},
				{name: "unmatched", domain: "edge", bucket: map[string]string{"nobody": "x"}, blanket: &allow},
				{name: "unmatched, extra pair", domain: "edge", bucket: map[string]string{"api": "x", "extra": "y"}, blanket: &allow},
				{name: "a level without a limit", domain: "edge", bucket: map[string]string{"tenant": "acme"}, blanket: &allow},
				{name: "unknown domain", domain: "elsewhere", bucket: map[string]string{"api": "x"}, blanket: &allow},
			}
			for _, tc := range cases {
				resps, err := exchange(t, c, &rlqspb.RateLimitQuotaUsageReports{Domain: tc.domain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(tc.bucket, 1, 0, 0)}})
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				s := strategyOf(t, resps[0])
				if tc.blanket != nil {
					if s.GetTokenBucket() != nil || s.GetBlanketRule() != *tc.blanket {
						t.Errorf("%s: %v, want blanket %s", tc.name, s, *tc.blanket)
					}
					continue
				}
				tb := s.GetTokenBucket()
				if tb.GetMaxTokens() != tc.tokens || tb.GetTokensPerFill().GetValue() != tc.tokens || tb.GetFillInterval().AsDuration() != tc.fill {
					t.Errorf("%s: %v, want a token bucket of %d per %s", tc.name, s, tc.tokens, tc.fill)
				}
			}
		})
	}
}

// TestQuotaAssignmentLifecycle: an assignment's time to live is a few
// report intervals in whole seconds; the same demand gets the identical
// assignment again (which only extends its time to live); a bucket the
// stream stops reporting is abandoned once its time to live has passed.
func TestQuotaAssignmentLifecycle(t *testing.T) {
	clock := fakeclock.New(quotaStart)
	c := quotaReplicas(t, quotaBackends(t)[0].stores(t, 1, clock), rls.QuotaOptions{Clock: clock.Now, RebalanceInterval: -1})[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := c.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(r *rlqspb.RateLimitQuotaUsageReports) *rlqspb.RateLimitQuotaResponse {
		t.Helper()
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	a, k := map[string]string{"api": "a"}, map[string]string{"api": "k"}
	first := send(&rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(a, 1, 0, 0), usage(k, 1, 0, 0)}})
	if ttl := first.GetBucketAction()[0].GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration(); ttl != 15*time.Second {
		t.Errorf("first assignment's time to live %s, want 15s: three of Envoy's 5s report intervals", ttl)
	}
	var prev *typev3.RateLimitStrategy
	for i := range 3 {
		clock.Advance(time.Second)
		resp := send(&rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(a, 100, 0, time.Second), usage(k, 100, 0, time.Second)}})
		qa := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
		if ttl := qa.GetAssignmentTimeToLive().AsDuration(); ttl != 3*time.Second {
			t.Errorf("time to live %s, want 3s: three 1s report intervals", ttl)
		}
		if i > 0 && qa.GetRateLimitStrategy().String() != prev.String() {
			t.Errorf("report %d, same demand: %v, want the identical assignment %v", i, qa.GetRateLimitStrategy(), prev)
		}
		prev = qa.GetRateLimitStrategy()
	}
	// Its demand with 5% headroom, 106, and half the 294 spare.
	if got := prev.GetTokenBucket().GetTokensPerFill().GetValue(); got != 106+147 {
		t.Errorf("demand 100/s alone on 400/s assigned %d tokens/s, want 253", got)
	}
	// k stops being reported: after its 3s, it is abandoned.
	for range 4 {
		clock.Advance(time.Second)
		resp := send(&rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(a, 100, 0, time.Second)}})
		for _, act := range resp.GetBucketAction() {
			if act.GetAbandonAction() != nil {
				if act.GetBucketId().GetBucket()["api"] != "k" {
					t.Fatalf("abandoned %v, want only the bucket no longer reported", act.GetBucketId())
				}
				return
			}
		}
	}
	t.Fatal("a bucket not reported for longer than its time to live was never abandoned")
}

// TestQuotaBadInput: a first report without a domain, a second domain on
// a stream, an empty BucketId, an empty key, absurd counts, a negative or
// absurd time elapsed each end the stream with InvalidArgument, and
// nothing of them is stored; a stream that never reports stores nothing
// and leaves nothing running (TestMain checks for goroutines).
func TestQuotaBadInput(t *testing.T) {
	ok := usage(map[string]string{"api": "bad"}, 1, 0, time.Second)
	bad := []struct {
		name    string
		reports []*rlqspb.RateLimitQuotaUsageReports
	}{
		{"no domain", []*rlqspb.RateLimitQuotaUsageReports{{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{ok}}}},
		{"another domain", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "elsewhere"}, {Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{ok}}}},
		{"empty BucketId", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{ok, usage(nil, 1, 0, 0)}}}},
		{"empty key", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{ok, usage(map[string]string{"": "x"}, 1, 0, 0)}}}},
		{"absurd count", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{ok, usage(map[string]string{"api": "x"}, math.MaxUint64, 0, time.Second)}}}},
		{"negative count", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{ok, usage(map[string]string{"api": "x"}, 0, 1<<63, time.Second)}}}},
		{"negative time", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{ok, usage(map[string]string{"api": "x"}, 1, 0, -time.Second)}}}},
		{"absurd time", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{ok, usage(map[string]string{"api": "x"}, 1, 0, 1000*time.Hour)}}}},
	}
	for _, b := range quotaBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			clock := fakeclock.New(quotaStart)
			reb := &rls.Rebalancer{} // never ticked: it tells when a stream runs
			c := quotaReplicas(t, b.stores(t, 1, clock), rls.QuotaOptions{Clock: clock.Now}, rls.WithRebalancer(reb))[0]
			for _, tc := range bad {
				_, err := exchange(t, c, tc.reports...)
				if status.Code(err) != codes.InvalidArgument {
					t.Errorf("%s: %v, want InvalidArgument", tc.name, err)
				} else {
					t.Logf("%s: %v", tc.name, status.Convert(err).Message())
				}
			}
			// A stream that never reports: once its handler runs, it
			// stores nothing. (The bad streams above have ended: their
			// errors came back.)
			ctx, cancel := context.WithCancel(context.Background())
			if _, err := c.StreamRateLimitQuotas(ctx); err != nil {
				t.Fatal(err)
			}
			reb.AwaitStreams(t, 1)
			cancel()
			if n := b.keys(t); n > 0 {
				t.Errorf("%d keys stored after bad reports, want none", n)
			}
		})
	}
}

// TestQuotaTelemetry: every action sent is counted in
// tollgate.rls.quota.actions by domain and action.
func TestQuotaTelemetry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	cfg, err := rls.ParseConfig(rls.File{Name: "edge.yaml", Data: []byte(quotaConfig)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rls.NewServer(newMemory(t), rls.Options{Config: cfg, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	q, err := rls.NewQuotaServer(srv, rls.QuotaOptions{RebalanceInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	c := rlqspb.NewRateLimitQuotaServiceClient(grpctest.Serve(t, func(s *grpc.Server) { rlqspb.RegisterRateLimitQuotaServiceServer(s, q) }, nil))
	if _, err := exchange(t, c, &rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usage(map[string]string{"api": "x"}, 1, 0, 0), usage(map[string]string{"free": "x"}, 1, 0, 0), usage(map[string]string{"blocked": "x"}, 1, 0, 0),
	}}); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telemetry.MetricRLSQuotaActions {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				a, _ := p.Attributes.Value(telemetry.AttrRLSAction)
				d, _ := p.Attributes.Value(telemetry.AttrRLSDomain)
				got[d.AsString()+"/"+a.AsString()] += p.Value
			}
		}
	}
	want := map[string]int64{"edge/token_bucket": 1, "edge/allow_all": 1, "edge/deny_all": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: %v, want %v", telemetry.MetricRLSQuotaActions, got, want)
	}
}
