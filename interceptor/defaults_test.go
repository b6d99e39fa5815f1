package interceptor_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fields"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/idempotency"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/store"
)

// By default an admitted call carries no x-ratelimit-* trailers (a replay
// says it was one); a denial carries them all.
func TestAdmittedTrailersOffByDefault(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // a still clock: exact waits
	c := serve(t, newLimiter(t, newMemory(t, store.WithClock(func() time.Time { return now })), interceptor.WithRules(perTenant())))
	ctx := metadata.AppendToOutgoingContext(tenant(context.Background(), "a"), idempotency.DefaultHeader, "call-1")
	for i, want := range []metadata.MD{{}, {fields.Replayed: {"1"}}} {
		trailer, header, err := say(ctx, c, "hi")
		if err != nil {
			t.Fatal(err)
		}
		noRateLimitHeaders(t, header)
		if len(trailer) != len(want) || len(want) > 0 && one(t, trailer, fields.Replayed) != "1" {
			t.Fatalf("call %d: trailer %v, want %v", i+1, trailer, want)
		}
	}
	ctx = tenant(context.Background(), "a")
	for range 2 {
		if _, _, err := say(ctx, c, "hi"); err != nil {
			t.Fatal(err)
		}
	}
	trailer, _, err := say(ctx, c, "hi")
	wantCode(t, err, codes.ResourceExhausted, "per-tenant")
	want := map[string]string{
		fields.LegacyLimit: "3", fields.LegacyRemaining: "0", fields.LegacyReset: "3600",
		fields.RetryAfter: "1200", fields.Pushback: "1200000",
	}
	for k, v := range want {
		if got := one(t, trailer, k); got != v {
			t.Errorf("denial trailer %s = %s, want %s", k, got, v)
		}
	}
}

// A Limiter made while the global tracer provider is unset starts no spans
// until one is set, and then records its decisions there.
func TestSpansOnceGlobalProviderIsSet(t *testing.T) {
	if global := reflect.TypeOf(otel.GetTracerProvider()); global.Kind() != reflect.Pointer || global.Elem().PkgPath() != "go.opentelemetry.io/otel/internal/global" {
		t.Skip("otel's global tracer provider was set earlier in this process (go test -count > 1); its unset state cannot be restored")
	}
	// Later tests and benchmarks see a provider that records nothing.
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	c := serve(t, newLimiter(t, newMemory(t), interceptor.WithRules(perTenant())))
	ctx := tenant(context.Background(), "a")
	if _, _, err := say(ctx, c, "hi"); err != nil {
		t.Fatal(err)
	}
	tp, sr := tracer(t)
	otel.SetTracerProvider(tp)
	if _, _, err := say(ctx, c, "hi"); err != nil {
		t.Fatal(err)
	}
	ended := sr.Ended()
	if len(ended) != 1 || ended[0].Name() != "ratelimit per-tenant" {
		t.Fatalf("spans after otel.SetTracerProvider: %d, want 1 named %q", len(ended), "ratelimit per-tenant")
	}
	if got := spanAttrs(ended[0])[telemetry.AttrRemaining]; got != "1" {
		t.Errorf("span's remaining = %s, want 1", got)
	}
}
