package interceptor_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/telemetry"
)

// tracer returns a tracer provider whose spans sr records.
func tracer(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

// spanAttrs returns a span's attributes by key.
func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	out := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value.Emit()
	}
	return out
}

// Every decision is one span, a child of otelgrpc's server span, with the
// decision's attributes; the decisions counter and the store histogram see
// every call.
func TestSpansAndMetrics(t *testing.T) {
	tp, sr := tracer(t)
	m := newMeter(t)
	r := perTenant()
	r.Limits = interceptor.Fixed(tollgate.Limit{Rate: 1, Period: time.Hour, Burst: 1})
	l := newLimiter(t, newMemory(t), interceptor.WithRules(r),
		func(c *engine.Config) { c.TracerProvider = tp }, func(c *engine.Config) { c.MeterProvider = m.provider })
	c := serve(t, l, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp))))
	ctx := tenant(context.Background(), "a")
	if _, _, err := say(ctx, c, "hi"); err != nil {
		t.Fatal(err)
	}
	_, _, err := say(ctx, c, "hi")
	wantCode(t, err, codes.ResourceExhausted, "per-tenant")
	_, _, err = say(context.Background(), c, "hi")
	wantCode(t, err, codes.InvalidArgument, "per-tenant")

	// otelgrpc may end its server span after the client has its answer, so
	// look for those among the started spans; decision spans end before the
	// interceptor returns.
	servers := map[trace.SpanID]bool{}
	for _, s := range sr.Started() {
		if s.Name() == "tollgate.example.Echo/Say" {
			servers[s.SpanContext().SpanID()] = true
		}
	}
	var decisions []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == "ratelimit per-tenant" {
			decisions = append(decisions, s)
		}
	}
	if len(servers) != 3 || len(decisions) != 3 {
		t.Fatalf("%d server spans and %d decision spans, want 3 and 3", len(servers), len(decisions))
	}
	parents := map[trace.SpanID]bool{}
	for i, d := range decisions {
		if !servers[d.Parent().SpanID()] || !d.Parent().IsValid() {
			t.Errorf("decision %d: parent %v is not one of otelgrpc's server spans %v", i, d.Parent().SpanID(), servers)
		}
		parents[d.Parent().SpanID()] = true
	}
	if len(parents) != 3 {
		t.Errorf("decision spans share parents: %v", parents)
	}
	want := []map[attribute.Key]string{
		{telemetry.AttrRule: "per-tenant", telemetry.AttrScope: "call", telemetry.AttrAlgorithm: "token_bucket",
			telemetry.AttrLimit: "token_bucket 1/1h0m0s burst 1", telemetry.AttrCost: "1", telemetry.AttrAllowed: "true",
			telemetry.AttrRemaining: "0", telemetry.AttrRetryAfterMs: "0", telemetry.AttrReplayed: "false",
			telemetry.AttrFailMode: "none", telemetry.AttrOutcome: "allowed"},
		{telemetry.AttrAllowed: "false", telemetry.AttrRemaining: "0", telemetry.AttrFailMode: "none", telemetry.AttrOutcome: "denied"},
		{telemetry.AttrAllowed: "false", telemetry.AttrOutcome: "invalid"},
	}
	for i, w := range want {
		got := spanAttrs(decisions[i])
		for k, v := range w {
			if got[k] != v {
				t.Errorf("decision %d: %s = %q, want %q (all: %v)", i, k, got[k], v, got)
			}
		}
	}
	if ms := spanAttrs(decisions[1])[telemetry.AttrRetryAfterMs]; ms == "0" || ms == "" {
		t.Errorf("denied span retry_after_ms = %q, want > 0", ms)
	}
	// A denial is the limiter working, not an error; an invalid call is.
	if s := decisions[1].Status().Code; s != otelcodes.Unset {
		t.Errorf("denied span status %v, want Unset", s)
	}
	if s := decisions[2].Status().Code; s != otelcodes.Error || len(decisions[2].Events()) == 0 || decisions[2].Events()[0].Name != "exception" {
		t.Errorf("invalid span status %v events %v, want Error with a recorded exception", s, decisions[2].Events())
	}

	got := m.decisions(t)
	for k, v := range map[string]int64{
		"per-tenant/call/allowed/true":  1,
		"per-tenant/call/denied/false":  1,
		"per-tenant/call/invalid/false": 1,
	} {
		if got[k] != v {
			t.Errorf("decisions[%s] = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if sc := m.storeCalls(t); sc["per-tenant/ok"] != 2 || len(sc) != 1 {
		t.Errorf("store calls %v, want 2 ok", sc)
	}
}
