package grpctest_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate/internal/grpctest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServeAnswersAndStops(t *testing.T) {
	cc := grpctest.Serve(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, health.NewServer()) }, nil)
	r, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("status %v, want SERVING", r.GetStatus())
	}
}
