package exampleserver

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/tollgate/tollgate/interceptor"
)

// MetricsPath is the HTTP path the metrics are served on.
const MetricsPath = "/metrics"

// serveMetrics listens on addr and serves, on MetricsPath, the limiter's
// OpenTelemetry metrics in the Prometheus text format, until ctx is done.
// It returns the limiter option that records into it, and a function that
// stops serving and waits for the server to finish.
func serveMetrics(ctx context.Context, addr string, logger *log.Logger) (interceptor.Option, func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("-metrics-addr: %w", err)
	}
	// A registry of its own: only the limiter's metrics, not the Go
	// runtime's that the default registry carries.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		lis.Close()
		return nil, nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	mux := http.NewServeMux()
	mux.Handle(MetricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("metrics: %v", err)
		}
	}()
	logger.Printf("metrics on http://%s%s", lis.Addr(), MetricsPath)
	stop := func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		srv.Shutdown(shutdownCtx)
		<-done
		provider.Shutdown(shutdownCtx)
	}
	return interceptor.WithMeterProvider(provider), stop, nil
}
