package interceptor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/telemetry"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// tenantHeader is the metadata key the tests identify tenants by.
const tenantHeader = "x-tenant"

// serve runs the echo service behind l's interceptors over bufconn and
// returns a client for it. Both are stopped when the test ends.
func serve(t *testing.T, l *interceptor.Limiter, opts ...grpc.ServerOption) *echo.Client {
	t.Helper()
	opts = append(opts,
		grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(l.StreamServerInterceptor()))
	return serveWith(t, &echo.Server{}, opts...)
}

// serveWith runs srv with the given server options over bufconn.
func serveWith(t *testing.T, srv *echo.Server, opts ...grpc.ServerOption) *echo.Client {
	t.Helper()
	return echo.NewClient(grpctest.Serve(t, func(s *grpc.Server) { echo.Register(s, srv) }, opts))
}

// tenant returns ctx with the tenant header set.
func tenant(ctx context.Context, name string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, tenantHeader, name)
}

// say calls Say and returns its trailer, header and error.
func say(ctx context.Context, c *echo.Client, msg string) (trailer, header metadata.MD, err error) {
	_, err = c.Say(ctx, wrapperspb.String(msg), grpc.Trailer(&trailer), grpc.Header(&header))
	return trailer, header, err
}

// one returns the single value of key in md, failing the test unless there
// is exactly one.
func one(t *testing.T, md metadata.MD, key string) string {
	t.Helper()
	v := md.Get(key)
	if len(v) != 1 {
		t.Fatalf("metadata %q = %q, want exactly one value (all: %v)", key, v, md)
	}
	return v[0]
}

// noRateLimitHeaders fails the test when rate-limit metadata went out as
// headers: a header frame commits the call and disables client retries.
func noRateLimitHeaders(t *testing.T, header metadata.MD) {
	t.Helper()
	for k := range header {
		if strings.HasPrefix(k, "x-ratelimit") || k == "retry-after" || k == "grpc-retry-pushback-ms" {
			t.Fatalf("rate-limit metadata %q sent as a header: %v", k, header)
		}
	}
}

// wantCode fails the test unless err is a status with code and a message
// containing msg.
func wantCode(t *testing.T, err error, code interface{ String() string }, msg string) *status.Status {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code().String() != code.String() || !strings.Contains(st.Message(), msg) {
		t.Fatalf("error = %v, want %s containing %q", err, code, msg)
	}
	return st
}

// meter is a ManualReader-backed meter provider.
type meter struct {
	reader   *sdkmetric.ManualReader
	provider *sdkmetric.MeterProvider
}

func newMeter(t *testing.T) *meter {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &meter{reader: r, provider: mp}
}

// decisions returns the tollgate.decisions counter by
// "rule/scope/outcome/allowed".
func (m *meter) decisions(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, metric := range m.collect(t) {
		if metric.Name != telemetry.MetricDecisions {
			continue
		}
		sum, ok := metric.Data.(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("%s is %T, want a Sum[int64]", metric.Name, metric.Data)
		}
		for _, dp := range sum.DataPoints {
			out[fmt.Sprintf("%s/%s/%s/%s", attr(dp.Attributes, telemetry.AttrRule), attr(dp.Attributes, telemetry.AttrScope),
				attr(dp.Attributes, telemetry.AttrOutcome), attr(dp.Attributes, telemetry.AttrAllowed))] += dp.Value
		}
	}
	return out
}

// storeCalls returns how many store calls tollgate.store.duration saw, by
// "rule/result".
func (m *meter) storeCalls(t *testing.T) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for k, dp := range m.storeDurations(t) {
		out[k] = dp.Count
	}
	return out
}

// storeDurations returns the tollgate.store.duration data points by
// "rule/result".
func (m *meter) storeDurations(t *testing.T) map[string]metricdata.HistogramDataPoint[float64] {
	t.Helper()
	out := map[string]metricdata.HistogramDataPoint[float64]{}
	for _, metric := range m.collect(t) {
		if metric.Name != telemetry.MetricStoreDuration {
			continue
		}
		h, ok := metric.Data.(metricdata.Histogram[float64])
		if !ok {
			t.Fatalf("%s is %T, want a Histogram[float64]", metric.Name, metric.Data)
		}
		if metric.Unit != "s" {
			t.Fatalf("%s unit = %q, want s", metric.Name, metric.Unit)
		}
		for _, dp := range h.DataPoints {
			out[attr(dp.Attributes, telemetry.AttrRule)+"/"+attr(dp.Attributes, telemetry.AttrStoreResult)] = dp
		}
	}
	return out
}

func (m *meter) collect(t *testing.T) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		out = append(out, sm.Metrics...)
	}
	return out
}

func attr(set attribute.Set, key attribute.Key) string {
	v, ok := set.Value(key)
	if !ok {
		return "<none>"
	}
	return v.Emit()
}
