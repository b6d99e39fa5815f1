package rls_test

import (
	"context"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/rls"
)

// TestEdgeAndInterceptorShareOneQuota: Envoy's descriptor (tenant, acme) in
// domain "shop" and an interceptor rule named "shop" keyed by
// rls.Descriptor on the x-tenant header debit one bucket in one store.
func TestEdgeAndInterceptorShareOneQuota(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.store(t)
		domain := "shop-" + time.Now().Format("150405.000000")
		cfg, err := rls.ParseConfig(rls.File{Name: "shop.yaml", Data: []byte("domain: " + domain + `
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 10}
`)})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := rls.NewServer(st, rls.Options{Config: cfg, StoreTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		lim, err := interceptor.New(st, interceptor.WithRules(interceptor.Rule{
			Name:    domain,
			Methods: []string{echo.AllMethods},
			Key:     rls.Descriptor(rls.EntryFunc{Key: "tenant", Value: keyfunc.Metadata("x-tenant")}),
			Limits:  interceptor.Fixed(tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 10, Period: 24 * time.Hour}),
		}), interceptor.WithStoreTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lim.Close(context.Background()) })
		cc := grpctest.Serve(t, func(s *grpc.Server) {
			pb.RegisterRateLimitServiceServer(s, srv)
			echo.Register(s, &echo.Server{})
		}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor())})
		edge := pb.NewRateLimitServiceClient(cc)
		svc := echo.NewClient(cc)
		// 6 at the edge, then the service has 4 left.
		ctx := context.Background()
		for range 6 {
			resp, err := edge.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{d("tenant", "acme")}})
			if err != nil || resp.OverallCode != ok {
				t.Fatalf("edge: %v %v", resp, err)
			}
		}
		octx := metadata.AppendToOutgoingContext(ctx, "x-tenant", "acme")
		admitted := 0
		for range 6 {
			_, err := svc.Say(octx, wrapperspb.String("hi"))
			switch status.Code(err) {
			case codes.OK:
				admitted++
			case codes.ResourceExhausted:
			default:
				t.Fatal(err)
			}
		}
		if admitted != 4 {
			t.Fatalf("service admitted %d after 6 at the edge; want 4 of the shared 10", admitted)
		}
		resp, err := edge.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{d("tenant", "acme")}})
		if err != nil || resp.OverallCode != over {
			t.Fatalf("edge after the service used the rest: %v %v", resp, err)
		}
		if got, want := rls.StoreKey(domain, rls.Entry{Key: "tenant", Value: "acme"}), domain+"\x00ck:tenant=acme"; got != want {
			t.Fatalf("StoreKey %q, want %q", got, want)
		}
	})
}
