// Command tollgate-rls serves Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService) from a directory of
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
// name). SIGHUP reloads the configuration directory: a bad file is logged
// with its file, line and descriptor and the previous configuration keeps
// serving. SIGINT or SIGTERM stops gracefully. The server also serves the
// gRPC health service and reflection.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/rls"
	"github.com/tollgate/tollgate/store"
)

// Environment variables that select a Redis store. The first two are the
// example server's.
const (
	envRedisURL            = "REDIS_URL"
	envRedisClusterAddrs   = "REDIS_CLUSTER_ADDRS"
	envRedisSentinelAddrs  = "REDIS_SENTINEL_ADDRS"
	envRedisSentinelMaster = "REDIS_SENTINEL_MASTER"
)

// serviceName is the rate limit service's name for the health service.
const serviceName = "envoy.service.ratelimit.v3.RateLimitService"

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
	failMode        rls.FailMode
	storeTimeout    time.Duration
	headers         bool
	headerNames     [3]string
	shadow          bool
	shutdownTimeout time.Duration
	redisURL        string
	clusterAddrs    []string
	sentinelAddrs   []string
	sentinelMaster  string
}

func parseFlags(args []string, getenv func(string) string, errOut io.Writer) (config, error) {
	fs := flag.NewFlagSet("tollgate-rls", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var c config
	var failMode string
	fs.StringVar(&c.dir, "config", "", "directory of envoyproxy/ratelimit YAML files, one per domain (required)")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8081", "TCP address to listen on")
	fs.StringVar(&failMode, "fail-mode", rls.FailError.String(), "when the store cannot decide: error (UNAVAILABLE: Envoy's failure_mode_deny decides) or open (answer OK)")
	fs.DurationVar(&c.storeTimeout, "store-timeout", interceptor.DefaultStoreTimeout, "how long a request waits for the store before the fail mode applies")
	fs.BoolVar(&c.headers, "response-headers", false, "add the limit, remaining and reset headers to responses (as LIMIT_RESPONSE_HEADERS_ENABLED)")
	fs.StringVar(&c.headerNames[0], "limit-header", rls.DefaultLimitHeader, "name of the limit header")
	fs.StringVar(&c.headerNames[1], "remaining-header", rls.DefaultRemainingHeader, "name of the remaining header")
	fs.StringVar(&c.headerNames[2], "reset-header", rls.DefaultResetHeader, "name of the reset header")
	fs.BoolVar(&c.shadow, "shadow-mode", false, "decide and debit as usual but always answer OK (as SHADOW_MODE)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 5*time.Second, "how long a graceful stop waits for running calls")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: tollgate-rls -config DIR [flags]\n\nEnvoy's rate limit service over a tollgate store. The store is in-process unless\n%s, %s or %s (with %s) names a Redis.\nSIGHUP reloads the configuration.\n\n",
			envRedisURL, envRedisClusterAddrs, envRedisSentinelAddrs, envRedisSentinelMaster)
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
	}
	switch failMode {
	case rls.FailError.String():
		c.failMode = rls.FailError
	case rls.FailOpen.String():
		c.failMode = rls.FailOpen
	default:
		return config{}, fmt.Errorf("-fail-mode %q: want error or open", failMode)
	}
	c.redisURL = getenv(envRedisURL)
	c.clusterAddrs = list(getenv(envRedisClusterAddrs))
	c.sentinelAddrs = list(getenv(envRedisSentinelAddrs))
	c.sentinelMaster = getenv(envRedisSentinelMaster)
	named := 0
	for _, set := range []bool{c.redisURL != "", len(c.clusterAddrs) > 0, len(c.sentinelAddrs) > 0} {
		if set {
			named++
		}
	}
	switch {
	case named > 1:
		return config{}, fmt.Errorf("more than one of %s, %s and %s is set: choose one", envRedisURL, envRedisClusterAddrs, envRedisSentinelAddrs)
	case len(c.sentinelAddrs) > 0 && c.sentinelMaster == "":
		return config{}, fmt.Errorf("%s needs %s, the name of the primary", envRedisSentinelAddrs, envRedisSentinelMaster)
	}
	return c, nil
}

func list(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// run listens on cfg.addr and serves until ctx is done.
func run(ctx context.Context, cfg config, logOut io.Writer) error {
	lis, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	return serve(ctx, cfg, lis, hup, logOut)
}

// serve serves on lis until ctx is done, reloading the configuration
// directory whenever hup receives. It closes lis in every case.
func serve(ctx context.Context, cfg config, lis net.Listener, hup <-chan os.Signal, logOut io.Writer) error {
	logger := log.New(logOut, "", log.LstdFlags)
	conf, err := rls.LoadDir(cfg.dir)
	if err != nil {
		lis.Close()
		return err
	}
	st, closeStore, err := newStore(ctx, cfg, logger)
	if err != nil {
		lis.Close()
		return err
	}
	defer closeStore()
	opts := []rls.Option{rls.WithConfig(conf), rls.WithFailMode(cfg.failMode), rls.WithStoreTimeout(cfg.storeTimeout), rls.WithShadowMode(cfg.shadow)}
	if cfg.headers {
		opts = append(opts, rls.WithResponseHeaders(cfg.headerNames[0], cfg.headerNames[1], cfg.headerNames[2]))
	}
	srv, err := rls.NewServer(st, opts...)
	if err != nil {
		lis.Close()
		return err
	}
	gs := grpc.NewServer(grpc.StatsHandler(otelgrpc.NewServerHandler()))
	pb.RegisterRateLimitServiceServer(gs, srv)
	hs := health.NewServer()
	hs.SetServingStatus(serviceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)

	logger.Printf("configuration %s: domains %s", cfg.dir, strings.Join(conf.Domains(), ", "))
	logger.Printf("listening on %s", lis.Addr())
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	for done := false; !done; {
		select {
		case err := <-served:
			return fmt.Errorf("serve: %w", err)
		case <-hup:
			reload(srv, cfg.dir, logger)
		case <-ctx.Done():
			done = true
		}
	}
	logger.Printf("shutting down (waiting up to %s for running calls)", cfg.shutdownTimeout)
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(cfg.shutdownTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		gs.Stop()
		<-stopped
	}
	if err := <-served; err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	logger.Printf("stopped")
	return nil
}

// reload swaps in the configuration directory's files if they are all
// valid. The old configuration serves until then, and calls in flight
// finish with the one they began with.
func reload(srv *rls.Server, dir string, logger *log.Logger) {
	next, err := rls.LoadDir(dir)
	if err != nil {
		logger.Printf("reload rejected, previous configuration kept: %v", err)
		return
	}
	srv.SetConfig(next)
	logger.Printf("reloaded %s: domains %s", dir, strings.Join(next.Domains(), ", "))
}

// newStore returns the store the environment names and a function that
// releases it. Clients are set up as the example server sets them up: the
// store deadline reaches the socket and nothing is re-sent.
func newStore(ctx context.Context, cfg config, logger *log.Logger) (tollgate.Store, func(), error) {
	var client redis.UniversalClient
	switch {
	case cfg.redisURL != "":
		opt, err := redis.ParseURL(cfg.redisURL)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", envRedisURL, err)
		}
		opt.ContextTimeoutEnabled, opt.MaxRetries = true, -1
		client = redis.NewClient(opt)
		logger.Printf("store: Redis at %s (%s)", opt.Addr, envRedisURL)
	case len(cfg.clusterAddrs) > 0:
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.clusterAddrs, ContextTimeoutEnabled: true, MaxRetries: -1})
		logger.Printf("store: Redis Cluster seeded by %s (%s)", strings.Join(cfg.clusterAddrs, ","), envRedisClusterAddrs)
	case len(cfg.sentinelAddrs) > 0:
		client = redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: cfg.sentinelMaster, SentinelAddrs: cfg.sentinelAddrs, ContextTimeoutEnabled: true, MaxRetries: -1,
		})
		logger.Printf("store: Redis primary %q from Sentinels %s (%s)", cfg.sentinelMaster, strings.Join(cfg.sentinelAddrs, ","), envRedisSentinelAddrs)
	default:
		logger.Printf("store: in-process memory (set %s, %s or %s for Redis)", envRedisURL, envRedisClusterAddrs, envRedisSentinelAddrs)
		return store.NewMemory(), func() {}, nil
	}
	pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := client.Ping(pingCtx).Err(); err != nil {
		logger.Printf("warning: Redis does not answer (%v); fail mode %s applies until it does", err, cfg.failMode)
	}
	return store.NewRedis(client), func() {
		if err := client.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			logger.Printf("closing Redis client: %v", err)
		}
	}, nil
}
