package interceptor_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
)

// trailerSink stands in for the transport stream grpc.SetTrailer writes to,
// so that the benchmark measures the interceptor and not gRPC's transport.
type trailerSink struct{ grpc.ServerTransportStream }

func (trailerSink) SetTrailer(metadata.MD) error { return nil }

// BenchmarkUnaryAdmit measures the interceptor's own cost per admitted call
// on the Memory store, without a gRPC transport and with the global no-op
// telemetry.
func BenchmarkUnaryAdmit(b *testing.B) {
	benchmarkAdmit(b, interceptor.Rule{
		Name: "per-tenant", Key: keyfunc.Metadata(tenantHeader), Limits: interceptor.Fixed(tollgate.PerSecond(1_000_000)),
	})
}

// BenchmarkUnaryAdmitTwoLimits is BenchmarkUnaryAdmit with two limits on
// the tenant, decided together with one Store.AllowAll.
func BenchmarkUnaryAdmitTwoLimits(b *testing.B) {
	benchmarkAdmit(b, interceptor.Rule{
		Name: "per-tenant", Key: keyfunc.Metadata(tenantHeader),
		Limits: interceptor.Fixed(tollgate.PerSecond(1_000_000), tollgate.PerMinute(60_000_000)),
	})
}

// BenchmarkUnaryAdmitTwoRules is BenchmarkUnaryAdmit with a per-tenant and a
// global rule on the call, decided together with one Store.AllowAll.
func BenchmarkUnaryAdmitTwoRules(b *testing.B) {
	benchmarkAdmit(b,
		interceptor.Rule{Name: "per-tenant", Key: keyfunc.Metadata(tenantHeader), Limits: interceptor.Fixed(tollgate.PerSecond(1_000_000))},
		interceptor.Rule{Name: "global", Key: keyfunc.Method(), Limits: interceptor.Fixed(tollgate.PerSecond(1_000_000))})
}

// BenchmarkUnaryAdmitTrailers is BenchmarkUnaryAdmit with the x-ratelimit-*
// trailers on admitted calls (WithAdmittedTrailers).
func BenchmarkUnaryAdmitTrailers(b *testing.B) {
	benchmarkAdmitWith(b, []interceptor.Option{interceptor.WithAdmittedTrailers()},
		interceptor.Rule{Name: "per-tenant", Key: keyfunc.Metadata(tenantHeader), Limits: interceptor.Fixed(tollgate.PerSecond(1_000_000))})
}

func benchmarkAdmit(b *testing.B, rules ...interceptor.Rule) { benchmarkAdmitWith(b, nil, rules...) }

func benchmarkAdmitWith(b *testing.B, opts []interceptor.Option, rules ...interceptor.Rule) {
	l, err := interceptor.New(newMemory(b), append(opts, interceptor.WithRules(rules...))...)
	if err != nil {
		b.Fatal(err)
	}
	unary := l.UnaryServerInterceptor()
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(tenantHeader, "a"))
	ctx = grpc.NewContextWithServerTransportStream(ctx, trailerSink{})
	info := &grpc.UnaryServerInfo{FullMethod: echo.SayMethod}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := unary(ctx, nil, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnaryUnmatched is the cost for a method no rule matches.
func BenchmarkUnaryUnmatched(b *testing.B) {
	l, err := interceptor.New(newMemory(b), interceptor.WithRules(interceptor.Rule{
		Name: "say", Methods: []string{echo.SayMethod}, Key: keyfunc.Method(), Limits: interceptor.Fixed(tollgate.PerSecond(1)),
	}))
	if err != nil {
		b.Fatal(err)
	}
	unary := l.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: echo.CountMethod}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.ReportAllocs()
	for b.Loop() {
		_, _ = unary(context.Background(), nil, info, handler)
	}
}
