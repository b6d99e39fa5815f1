// Command tollgate-rls serves Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService), and on the same listener
// its rate limit quota service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService), from a directory of
// envoyproxy/ratelimit configuration files, one per domain, deciding in the
// same store as the tollgate interceptors.
//
// Usage:
//
//	tollgate-rls -config DIR [-addr host:port] [flags]
//	tollgate-rls            # envoyproxy/ratelimit's environment, as Envoy Gateway runs it
//
// Started without -config, every setting comes from envoyproxy/ratelimit's
// environment variables with that server's defaults (env.go): the
// configuration from RUNTIME_ROOT or over xDS (CONFIG_TYPE=GRPC_XDS_SOTW,
// xds.go), /healthcheck on PORT, that server's metric families at
// PROMETHEUS_ADDR; a flag wins over its variable.
//
// The store is in-process memory unless the environment names a Redis:
// REDIS_URL (one node, a redis:// or rediss:// URL), REDIS_CLUSTER_ADDRS
// (comma-separated seeds of a Cluster), or REDIS_SENTINEL_ADDRS
// (comma-separated Sentinels) with REDIS_SENTINEL_MASTER (the primary's
// name). The configuration directory is watched: any change to it (a file
// written, a Kubernetes ConfigMap's symlink swapped) reloads it, as SIGHUP
// does; a bad file is logged with its file, line and descriptor, counted in
// the tollgate.rls.config.reloads metric, and the previous configuration
// keeps serving. -tls-cert and -tls-key serve TLS (reloaded when the files
// change), -tls-client-ca requires client certificates that CA signed. The
// metrics listener also serves the loaded configuration as JSON at
// /config. SIGINT or SIGTERM stops gracefully. The server also serves the
// gRPC health service and reflection.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/tollgate/tollgate/internal/serving"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/rls"
)

// Environment variables that select a Redis store, as the example server
// reads them.
const (
	envRedisURL            = serving.EnvRedisURL
	envRedisClusterAddrs   = serving.EnvRedisClusterAddrs
	envRedisSentinelAddrs  = serving.EnvRedisSentinelAddrs
	envRedisSentinelMaster = serving.EnvRedisSentinelMaster
)

// serviceName is the rate limit service's name for the health service.
const serviceName = "envoy.service.ratelimit.v3.RateLimitService"

// quotaServiceName is the rate limit quota service's name for the health
// service.
const quotaServiceName = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := parseFlags(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tollgate-rls:", err)
		os.Exit(2)
	}
	if err := run(ctx, cfg, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tollgate-rls:", err)
		os.Exit(1)
	}
}

// run listens on cfg.addr and serves until ctx is done.
func run(ctx context.Context, cfg config, logOut io.Writer) error {
	lis, err := net.Listen(cmp.Or(cfg.network, "tcp"), cfg.addr)
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1) // SIGHUP, and the directory's changes (watch)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	return serve(ctx, cfg, lis, hup, logOut)
}

// configPath is where the metrics listener serves the loaded
// configuration; the HTTP listener serves it at rlconfigPath, where
// envoyproxy/ratelimit's debug listener does.
const (
	configPath   = "/config"
	rlconfigPath = "/rlconfig"
)

// serve serves on lis until ctx is done, with the configuration of the
// directory (reloaded whenever it changes or hup receives) or of the xDS
// server. It closes lis in every case.
func serve(ctx context.Context, cfg config, lis net.Listener, hup chan os.Signal, logOut io.Writer) (err error) {
	defer func() {
		if err != nil {
			lis.Close()
		}
	}()
	logger := log.New(logOut, "", log.LstdFlags)
	for _, n := range cfg.notes {
		logger.Printf("note: %s", n)
	}
	var conf *rls.Config
	if cfg.xds == nil {
		if conf, err = rls.LoadDir(cfg.dir); err != nil {
			return err
		}
	}
	tp, err := cfg.tracing.provider(ctx)
	if err != nil {
		return err
	}
	if tp != nil {
		defer tp.Shutdown(context.WithoutCancel(ctx))
	}
	st, closeStore, err := cfg.redis.Store(ctx, logger)
	if err != nil {
		return err
	}
	defer closeStore()
	var srv *rls.Server
	opts := rls.Options{
		StoreFailAnswer: cfg.storeFail, StoreTimeout: cfg.storeTimeout,
		Shadow: cfg.shadow, QuotaMode: cfg.quotaMode, CountOverLimit: cfg.countOver, DynamicMetadata: cfg.metadata,
		ResponseHeaders: cfg.headers, LimitHeader: cfg.headerNames[0], RemainingHeader: cfg.headerNames[1], ResetHeader: cfg.headerNames[2],
	}
	if tp != nil { // a nil *sdktrace.TracerProvider is not a nil interface
		opts.TracerProvider = tp
	}
	dump := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(srv.Config())
	})
	reloads := noReloads
	var meters metric.MeterProvider // the metrics listener's; nil: otel's global one
	var ref *refMetrics
	var serverOpts []grpc.ServerOption
	if cfg.metricsAddr != "" {
		ref = newRefMetrics()
		provider, stopMetrics, err := serving.ServeMetricsWith(ctx, cfg.metricsAddr, logger, serving.MetricsOptions{
			Path: cfg.metricsPath, Extra: map[string]http.Handler{configPath: dump}, Collectors: ref.collectors(),
		})
		if err != nil {
			return err
		}
		defer stopMetrics()
		meters = provider
		opts.MeterProvider, opts.HitCounts, opts.NearLimitRatio = provider, ref.record, cfg.nearRatio
		if reloads, err = reloadCounter(provider); err != nil {
			return err
		}
		serverOpts = append(serverOpts, grpc.ChainUnaryInterceptor(ref.interceptor))
	}
	if cfg.tls.Enabled() {
		tc, err := cfg.tls.Config(serving.ReloadReporter(logger, meters, "rls"))
		if err != nil {
			return err
		}
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(tc)))
	}
	if cfg.maxConnAge > 0 {
		serverOpts = append(serverOpts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: cfg.maxConnAge, MaxConnectionAgeGrace: cfg.maxConnAgeGrace}))
	}
	if srv, err = rls.NewServer(st, opts); err != nil {
		return err
	}
	loads := &loader{srv: srv, logger: logger, reloads: reloads, ref: ref, ctx: ctx}
	hs := health.NewServer()
	health := &healthState{grpc: hs, needConfig: cfg.healthyOnConfig}
	loads.onLoad = health.configLoaded
	health.set()
	if cfg.xds == nil {
		loads.loaded(conf, cfg.dir)
		if err := watch(ctx, cfg.dir, hup, logger); err != nil {
			return fmt.Errorf("watching %s: %w", cfg.dir, err)
		}
	} else {
		xc := &xdsClient{x: cfg.xds, apply: func(c *rls.Config) { loads.loaded(c, "xDS") }, reject: loads.rejected, logger: logger}
		done := make(chan struct{})
		go func() { defer close(done); xc.run(ctx) }()
		defer func() { <-done }()
		if !cfg.forceStart {
			// As envoyproxy/ratelimit without FORCE_START_WITHOUT_INITIAL_CONFIG:
			// nothing listens before the first configuration.
			logger.Printf("waiting for the first configuration from %s", cfg.xds.url)
			if !loads.await(ctx) {
				return nil
			}
		}
	}
	if cfg.httpAddr != "" {
		stopHTTP, err := serveHTTP(ctx, cfg.httpAddr, logger, map[string]http.Handler{healthPath: health, rlconfigPath: dump})
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	if tp != nil {
		// The call's server span, the parent of the decision's.
		serverOpts = append(serverOpts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp))))
	}
	gs := grpc.NewServer(serverOpts...)
	pb.RegisterRateLimitServiceServer(gs, &gate{srv: srv, loaded: &loads.any})
	rebalance := cfg.quotaRebalance
	if rebalance == 0 {
		rebalance = -1 // -quota-rebalance 0: only at reports
	}
	quota, err := rls.NewQuotaServer(srv, rls.QuotaOptions{AssignmentReports: cfg.quotaReports, RebalanceInterval: rebalance})
	if err != nil {
		return err
	}
	rlqspb.RegisterRateLimitQuotaServiceServer(gs, quota)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	logger.Printf("listening on %s (%s)", lis.Addr(), cfg.tls.Mode())
	var onHangup func()
	if cfg.xds == nil {
		onHangup = func() { loads.reload(cfg.dir) }
	}
	return serving.Serve(ctx, gs, hs, lis, cfg.shutdownTimeout, logger, hup, onHangup)
}

// noReloads counts nothing: the command serves no metrics.
var noReloads metric.Int64Counter = noop.Int64Counter{}

func reloadCounter(mp metric.MeterProvider) (metric.Int64Counter, error) {
	return mp.Meter("github.com/tollgate/tollgate/cmd/tollgate-rls").Int64Counter(telemetry.MetricRLSConfigReloads,
		metric.WithUnit("{reload}"), metric.WithDescription("Configuration reloads, by result."))
}
