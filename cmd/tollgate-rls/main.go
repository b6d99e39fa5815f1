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
	"strings"
	"syscall"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/tollgate/tollgate/internal/serving"
	"github.com/tollgate/tollgate/rls"
	"github.com/tollgate/tollgate/telemetry"
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

// config is everything the command is configured with.
type config struct {
	dir             string
	addr            string
	storeFail       rls.StoreFailAnswer
	storeTimeout    time.Duration
	headers         bool
	headerNames     [3]string
	shadow          bool
	shutdownTimeout time.Duration
	metricsAddr     string
	tls             serving.TLSFiles
	redis           serving.Redis
	quotaReports    int
	quotaRebalance  time.Duration
}

func parseFlags(args []string, getenv func(string) string, errOut io.Writer) (config, error) {
	fs := flag.NewFlagSet("tollgate-rls", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var c config
	var failMode string
	fs.StringVar(&c.dir, "config", "", "directory of envoyproxy/ratelimit YAML files, one per domain (required)")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8081", "TCP address to listen on")
	fs.StringVar(&failMode, "fail-mode", "closed", "when the store cannot decide: closed, also spelled error (UNAVAILABLE: Envoy's failure_mode_deny decides) or open (answer OK)")
	fs.DurationVar(&c.storeTimeout, "store-timeout", rls.DefaultStoreTimeout, "how long a request waits for the store before the fail mode applies")
	fs.BoolVar(&c.headers, "response-headers", false, "add the limit, remaining and reset headers to responses (as LIMIT_RESPONSE_HEADERS_ENABLED)")
	fs.StringVar(&c.headerNames[0], "limit-header", rls.DefaultLimitHeader, "name of the limit header")
	fs.StringVar(&c.headerNames[1], "remaining-header", rls.DefaultRemainingHeader, "name of the remaining header")
	fs.StringVar(&c.headerNames[2], "reset-header", rls.DefaultResetHeader, "name of the reset header")
	fs.BoolVar(&c.shadow, "shadow-mode", false, "decide and debit as usual but always answer OK (as SHADOW_MODE)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 5*time.Second, "how long a graceful stop waits for running calls")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "TCP address to serve Prometheus metrics on, at "+serving.MetricsPath+", and the loaded configuration at "+configPath+" (empty: none)")
	fs.StringVar(&c.tls.Cert, "tls-cert", "", "PEM certificate to serve TLS with (with -tls-key; reloaded when the file changes)")
	fs.StringVar(&c.tls.Key, "tls-key", "", "PEM private key of -tls-cert")
	fs.StringVar(&c.tls.ClientCA, "tls-client-ca", "", "PEM CA that must have signed every client's certificate (mutual TLS)")
	fs.IntVar(&c.quotaReports, "quota-assignment-reports", rls.DefaultAssignmentReports, "rate limit quota service: how many report intervals an assignment lives without another report")
	fs.DurationVar(&c.quotaRebalance, "quota-rebalance", rls.DefaultRebalanceInterval, "rate limit quota service: how often each stream's assignments are computed again between reports (0: only at reports)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: tollgate-rls -config DIR [flags]\n\nEnvoy's rate limit service over a tollgate store. %s\nA change to the configuration directory, or SIGHUP, reloads it.\n\n", serving.EnvHelp)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch {
	case fs.NArg() > 0:
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.dir == "":
		return config{}, errors.New("-config DIR is required")
	case c.tls.Enabled() && (c.tls.Cert == "" || c.tls.Key == ""):
		return config{}, errors.New("-tls-cert and -tls-key go together (and -tls-client-ca needs them)")
	}
	switch failMode {
	case "closed", "error":
		c.storeFail = rls.AnswerUnavailable
	case "open":
		c.storeFail = rls.AnswerOK
	default:
		return config{}, fmt.Errorf("-fail-mode %q: want closed (or error) or open", failMode)
	}
	var err error
	if c.redis, err = serving.RedisFromEnv(getenv); err != nil {
		return config{}, err
	}
	return c, nil
}

// run listens on cfg.addr and serves until ctx is done.
func run(ctx context.Context, cfg config, logOut io.Writer) error {
	lis, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1) // SIGHUP, and the directory's changes (watch)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	return serve(ctx, cfg, lis, hup, logOut)
}

// configPath is where the metrics listener serves the loaded
// configuration.
const configPath = "/config"

// serve serves on lis until ctx is done, reloading the configuration
// directory whenever it changes or hup receives. It closes lis in every
// case.
func serve(ctx context.Context, cfg config, lis net.Listener, hup chan os.Signal, logOut io.Writer) error {
	logger := log.New(logOut, "", log.LstdFlags)
	conf, err := rls.LoadDir(cfg.dir)
	if err != nil {
		lis.Close()
		return err
	}
	st, closeStore, err := cfg.redis.Store(ctx, logger)
	if err != nil {
		lis.Close()
		return err
	}
	defer closeStore()
	opts := []rls.Option{rls.WithConfig(conf), rls.WithStoreFailAnswer(cfg.storeFail), rls.WithStoreTimeout(cfg.storeTimeout)}
	if cfg.shadow {
		opts = append(opts, rls.WithShadow())
	}
	var srv *rls.Server
	reloads := noReloads
	var meters metric.MeterProvider // the metrics listener's; nil: otel's global one
	if cfg.metricsAddr != "" {
		dump := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(srv.Config())
		})
		provider, stopMetrics, err := serving.ServeMetrics(ctx, cfg.metricsAddr, logger, map[string]http.Handler{configPath: dump})
		if err != nil {
			lis.Close()
			return err
		}
		defer stopMetrics()
		meters = provider
		opts = append(opts, rls.WithMeterProvider(provider))
		if reloads, err = reloadCounter(provider); err != nil {
			lis.Close()
			return err
		}
	}
	var serverOpts []grpc.ServerOption
	if cfg.tls.Enabled() {
		tc, err := cfg.tls.Config(serving.ReloadReporter(logger, meters, "rls"))
		if err != nil {
			lis.Close()
			return err
		}
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(tc)))
	}
	if cfg.headers {
		opts = append(opts, rls.WithResponseHeaders(cfg.headerNames[0], cfg.headerNames[1], cfg.headerNames[2]))
	}
	if srv, err = rls.NewServer(st, opts...); err != nil {
		lis.Close()
		return err
	}
	if err := watch(ctx, cfg.dir, hup, logger); err != nil {
		lis.Close()
		return fmt.Errorf("watching %s: %w", cfg.dir, err)
	}
	gs := grpc.NewServer(append(serverOpts, grpc.StatsHandler(otelgrpc.NewServerHandler()))...)
	pb.RegisterRateLimitServiceServer(gs, srv)
	quota, err := rls.NewQuotaServer(srv, rls.WithAssignmentReports(cfg.quotaReports), rls.WithRebalanceInterval(cfg.quotaRebalance))
	if err != nil {
		lis.Close()
		return err
	}
	rlqspb.RegisterRateLimitQuotaServiceServer(gs, quota)
	hs := health.NewServer()
	hs.SetServingStatus(serviceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(quotaServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)

	if len(conf.Domains()) == 0 {
		logger.Printf("warning: configuration %s holds no domain (no .yaml file with a domain): every request is answered OK, unlimited", cfg.dir)
	} else {
		logger.Printf("configuration %s: domains %s", cfg.dir, strings.Join(conf.Domains(), ", "))
	}
	logger.Printf("listening on %s (%s)", lis.Addr(), cfg.tls.Mode())
	return serving.Serve(ctx, gs, hs, lis, cfg.shutdownTimeout, logger, hup, func() { reload(ctx, srv, cfg.dir, logger, reloads) })
}

// reload swaps in the configuration directory's files if they are all
// valid. The old configuration serves until then, and calls in flight
// finish with the one they began with.
func reload(ctx context.Context, srv *rls.Server, dir string, logger *log.Logger, reloads metric.Int64Counter) {
	next, err := rls.LoadDir(dir)
	if err != nil {
		reloads.Add(ctx, 1, metric.WithAttributes(telemetry.AttrResult.String("error")))
		logger.Printf("reload rejected, previous configuration kept: %v", err)
		return
	}
	srv.SetConfig(next)
	reloads.Add(ctx, 1, metric.WithAttributes(telemetry.AttrResult.String("ok")))
	logger.Printf("reloaded %s: domains %s", dir, strings.Join(next.Domains(), ", "))
}

// noReloads counts nothing: the command serves no metrics.
var noReloads metric.Int64Counter = noop.Int64Counter{}

func reloadCounter(mp metric.MeterProvider) (metric.Int64Counter, error) {
	return mp.Meter("github.com/tollgate/tollgate/cmd/tollgate-rls").Int64Counter(telemetry.MetricRLSConfigReloads,
		metric.WithUnit("{reload}"), metric.WithDescription("Configuration reloads, by result."))
}
