package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthPath is envoyproxy/ratelimit's health check, which Envoy Gateway's
// startup, readiness and liveness probes ask.
const healthPath = "/healthcheck"

// healthServiceName is the name envoyproxy/ratelimit gives its own
// service in the gRPC health service.
const healthServiceName = "ratelimit"

// healthState answers /healthcheck and the gRPC health service: healthy
// from the start (as envoyproxy/ratelimit, Redis or not), or, with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, once a configuration is loaded;
// a graceful stop turns it NOT_SERVING (serving.Serve).
type healthState struct {
	grpc       *health.Server
	needConfig bool
	config     atomic.Bool
}

// configLoaded records that a configuration is loaded.
func (h *healthState) configLoaded() {
	h.config.Store(true)
	h.set()
}

func (h *healthState) ok() bool { return !h.needConfig || h.config.Load() }

// set publishes the state in the gRPC health service.
func (h *healthState) set() {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if h.ok() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range []string{"", healthServiceName, serviceName, quotaServiceName} {
		h.grpc.SetServingStatus(name, st)
	}
}

// ServeHTTP answers 200 OK when healthy, 500 otherwise, as
// envoyproxy/ratelimit does; NOT_SERVING after a graceful stop began.
func (h *healthState) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	resp, err := h.grpc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: healthServiceName})
	if !h.ok() || err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte("OK"))
}

// serveHTTP serves handlers on addr until stop is called.
func serveHTTP(ctx context.Context, addr string, logger *log.Logger, handlers map[string]http.Handler) (stop func(), err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("HTTP listener: %w", err)
	}
	mux := http.NewServeMux()
	for path, h := range handlers {
		mux.Handle(path, h)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("HTTP listener: %v", err)
		}
	}()
	logger.Printf("health check on http://%s%s", lis.Addr(), healthPath)
	return func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		<-done
	}, nil
}
