package rls_test

import (
	"context"
	"fmt"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/rls"
)

// TestTelemetry: one span per call, one tollgate.decisions count per
// limited descriptor with interceptor's attribute names, and the store
// latency histogram.
func TestTelemetry(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	cfg, err := rls.ParseConfig(rls.File{Name: "api.yaml", Data: []byte(limitsYAML)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rls.NewServer(newMemory(t), rls.Options{Config: cfg, TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(descs ...*rlv3.RateLimitDescriptor) {
		t.Helper()
		if _, err := srv.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "api", Descriptors: descs}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		ask(d("user", "u"), d("watch", "w"), d("nothing", "n"))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	decisions := map[string]int64{}
	storeCalls := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name != telemetry.MetricDecisions {
					continue
				}
				for _, dp := range data.DataPoints {
					decisions[fmt.Sprintf("%s/%s/%s", get(dp.Attributes, telemetry.AttrRule), get(dp.Attributes, telemetry.AttrOutcome), get(dp.Attributes, telemetry.AttrAllowed))] += dp.Value
				}
			case metricdata.Histogram[float64]:
				if m.Name != telemetry.MetricStoreDuration {
					continue
				}
				for _, dp := range data.DataPoints {
					storeCalls[get(dp.Attributes, telemetry.AttrRule)+"/"+get(dp.Attributes, telemetry.AttrStoreResult)] += dp.Count
				}
			}
		}
	}
	want := map[string]int64{
		"api.user/allowed/true":        2,
		"api.user/denied/false":        1,
		"api.watch/allowed/true":       1,
		"api.watch/shadow_denied/true": 2,
	}
	if fmt.Sprint(decisions) != fmt.Sprint(want) {
		t.Fatalf("decisions %v\nwant %v", decisions, want)
	}
	// Per call: one AllowAll for the enforced descriptor, one Allow for the
	// shadow one.
	if got := storeCalls["api/ok"]; got != 6 {
		t.Fatalf("store calls %v, want 6 ok", storeCalls)
	}
	spans := sr.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	last := map[attribute.Key]string{}
	for _, kv := range spans[2].Attributes() {
		last[kv.Key] = kv.Value.Emit()
	}
	if spans[2].Name() != "ratelimit api" || last[telemetry.AttrOutcome] != "denied" || last[telemetry.AttrRLSDomain] != "api" || last[telemetry.AttrRLSDescriptors] != "3" {
		t.Fatalf("span %s %v", spans[2].Name(), last)
	}
}

func get(set attribute.Set, k attribute.Key) string {
	v, _ := set.Value(k)
	return v.Emit()
}

// TestStoreFailAnswerNames: the answers' names, and the zero value is the
// default (AnswerUnavailable, as envoyproxy/ratelimit answers).
func TestStoreFailAnswerNames(t *testing.T) {
	for a, want := range map[rls.StoreFailAnswer]string{rls.AnswerUnavailable: "unavailable", rls.AnswerOK: "ok", 2: "storefailanswer(2)", 9: "storefailanswer(9)"} {
		if a.String() != want {
			t.Errorf("StoreFailAnswer %d is %q, want %q", a, a.String(), want)
		}
	}
	var zero rls.StoreFailAnswer
	if zero != rls.AnswerUnavailable {
		t.Errorf("the zero StoreFailAnswer is %s, want the default %s", zero, rls.AnswerUnavailable)
	}
}
