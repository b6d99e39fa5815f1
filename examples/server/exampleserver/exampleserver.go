// Package exampleserver is the example echo server behind the rate limiter,
// as a library: the command in examples/server runs it, and tests (of the
// server and of the example client) run it in-process.
//
// The server chains, from the outside in: otelgrpc's stats handler (the
// call's span, parent of the limiter's), go-grpc-middleware's recovery
// interceptor (a panic becomes codes.Internal), then the limiter, wrapped in
// go-grpc-middleware's selector so that the gRPC health service is never
// limited. One rule, "per-tenant", limits every Echo method per value of the
// tenant header.
//
// The store is the in-process store.Memory unless the environment names a
// Redis: REDIS_URL (a redis:// or rediss:// URL, one node),
// REDIS_CLUSTER_ADDRS (comma-separated host:port seeds of a Cluster) or
// REDIS_SENTINEL_ADDRS with REDIS_SENTINEL_MASTER (Sentinel). With Redis,
// every replica of the server shares the tenants' quotas.
package exampleserver

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/serving"
	"github.com/tollgate/tollgate/store"
)

// RuleName is the name of the server's only rule, as it appears in denial
// messages, spans and metrics.
const RuleName = "per-tenant"

// Environment variables that select a Redis store (see package
// internal/serving, which tollgate-rls reads them with too).
const (
	// EnvRedisURL names a single Redis node, as a URL redis.ParseURL
	// accepts ("redis://user:pass@host:6379/0").
	EnvRedisURL = serving.EnvRedisURL
	// EnvRedisClusterAddrs names the seed nodes of a Redis Cluster,
	// comma-separated host:port pairs.
	EnvRedisClusterAddrs = serving.EnvRedisClusterAddrs
	// EnvRedisSentinelAddrs names Sentinels, comma-separated host:port
	// pairs, watching the primary EnvRedisSentinelMaster names.
	EnvRedisSentinelAddrs = serving.EnvRedisSentinelAddrs
	// EnvRedisSentinelMaster is the Sentinel name of the primary.
	EnvRedisSentinelMaster = serving.EnvRedisSentinelMaster
)

// MetricsPath is the HTTP path the metrics are served on.
const MetricsPath = serving.MetricsPath

// Config is everything the server is configured with.
type Config struct {
	// Addr is the TCP address Run listens on.
	Addr string
	// Limit is each tenant's limit.
	Limit tollgate.Limit
	// TenantHeader is the metadata key that names the tenant. A call without
	// it is refused with codes.InvalidArgument.
	TenantHeader string
	// FailMode says what the rule does when the store cannot decide.
	FailMode engine.FailMode
	// RedisURL, when set, selects a single-node Redis store.
	RedisURL string
	// RedisClusterAddrs, when set, selects a Redis Cluster store.
	RedisClusterAddrs []string
	// RedisSentinelAddrs, when set, selects the primary named
	// RedisSentinelMaster through these Sentinels.
	RedisSentinelAddrs []string
	// RedisSentinelMaster is the Sentinel name of the primary.
	RedisSentinelMaster string
	// StoreTimeout bounds each decision's wait for the store; past it the
	// fail mode applies.
	StoreTimeout time.Duration
	// ShutdownTimeout bounds the graceful stop: calls still running after
	// it are cancelled.
	ShutdownTimeout time.Duration
	// Flaky is the fraction, from 0 to 1, of calls whose first attempt the
	// echo handler fails with codes.Unavailable after the limiter admitted
	// it. It demonstrates idempotent retries: the client's retry carries
	// the same request id and is admitted as a replay, without a second
	// debit. Retried attempts (grpc-previous-rpc-attempts set) never fail.
	Flaky float64
	// MetricsAddr, when set, is the TCP address on which the limiter's
	// OpenTelemetry metrics are served for Prometheus, at MetricsPath.
	MetricsAddr string
	// HTTPAddr, when set, is the TCP address of the listener serving Echo
	// over Connect (the Connect, gRPC and gRPC-Web protocols) and
	// HTTPRoute, sharing the tenants' quotas with Addr.
	HTTPAddr string
	// AdminAddr, when set, is the TCP address of a separate listener for the
	// admin service (tollgate.admin.v1), which requires AdminToken.
	AdminAddr string
	// AdminToken is the bearer token admin calls must carry (EnvAdminToken).
	AdminToken string
	// AdminTLS, when it names a certificate, serves the admin listener over
	// TLS, and with a client CA requires client certificates it signed
	// (mutual TLS); the files are read again when they change.
	AdminTLS serving.TLSFiles
}

var algorithms = []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.SlidingWindow, tollgate.FixedWindow}

var failModes = []engine.FailMode{engine.FailOpen, engine.FailClosed, engine.FailLocal}

// ParseFlags reads the configuration from command-line arguments (without
// the program name) and from the environment through getenv. Usage and
// errors are written to errOut; -h gives flag.ErrHelp.
func ParseFlags(args []string, getenv func(string) string, errOut io.Writer) (Config, error) {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var (
		cfg       Config
		algorithm string
		failMode  string
	)
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:50051", "TCP address to listen on")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:8080", "TCP address serving Echo over Connect and gRPC-Web, and "+HTTPRoute+" (empty: none)")
	fs.Int64Var(&cfg.Limit.Rate, "rate", 10, "calls admitted per tenant in each -period")
	fs.DurationVar(&cfg.Limit.Period, "period", time.Second, "the period of -rate")
	fs.Int64Var(&cfg.Limit.Burst, "burst", 0, "most calls a tenant can make at once (token_bucket, gcra); 0 means -rate")
	fs.StringVar(&algorithm, "algorithm", tollgate.TokenBucket.String(), "token_bucket, gcra, sliding_window or fixed_window")
	fs.StringVar(&cfg.TenantHeader, "tenant-header", "x-tenant", "metadata key that names the tenant")
	fs.StringVar(&failMode, "fail-mode", engine.FailOpen.String(), "when the store cannot decide: open (admit), closed (refuse with UNAVAILABLE) or local (per-replica cap)")
	fs.DurationVar(&cfg.StoreTimeout, "store-timeout", 50*time.Millisecond, "how long a decision waits for the store before the fail mode applies")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 5*time.Second, "how long a graceful stop waits for running calls")
	fs.Float64Var(&cfg.Flaky, "flaky", 0, "fraction of first attempts the handler fails with UNAVAILABLE after admission (demonstrates replayed retries)")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "TCP address to serve Prometheus metrics on, at "+MetricsPath+" (empty: none)")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", "", "TCP address of a separate listener for the admin service (needs "+EnvAdminToken+"); empty: no admin service")
	fs.StringVar(&cfg.AdminTLS.Cert, "admin-tls-cert", "", "PEM certificate the admin listener serves TLS with (with -admin-tls-key; reloaded when the file changes)")
	fs.StringVar(&cfg.AdminTLS.Key, "admin-tls-key", "", "PEM private key of -admin-tls-cert")
	fs.StringVar(&cfg.AdminTLS.ClientCA, "admin-tls-client-ca", "", "PEM CA that must have signed every admin client's certificate (mutual TLS)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: server [flags]\n\nAn echo gRPC server rate-limited per tenant. %s\n\n", serving.EnvHelp)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var ok bool
	if cfg.Limit.Algorithm, ok = lookup(algorithms, algorithm); !ok {
		return Config{}, fmt.Errorf("-algorithm %q: want one of %s", algorithm, names(algorithms))
	}
	if cfg.FailMode, ok = lookup(failModes, failMode); !ok {
		return Config{}, fmt.Errorf("-fail-mode %q: want one of %s", failMode, names(failModes))
	}
	if err := cfg.Limit.Validate(); err != nil {
		return Config{}, fmt.Errorf("-rate, -period, -burst: %w", err)
	}
	if cfg.Limit.Burst != 0 && (cfg.Limit.Algorithm == tollgate.FixedWindow || cfg.Limit.Algorithm == tollgate.SlidingWindow) {
		return Config{}, fmt.Errorf("-burst %d: %s has no burst (it admits -rate per -period); -burst applies to token_bucket and gcra", cfg.Limit.Burst, cfg.Limit.Algorithm)
	}
	if cfg.Flaky < 0 || cfg.Flaky > 1 {
		return Config{}, fmt.Errorf("-flaky %v: want a fraction from 0 to 1", cfg.Flaky)
	}
	if cfg.AdminTLS.Enabled() && cfg.AdminAddr == "" {
		return Config{}, errors.New("-admin-tls-cert, -admin-tls-key and -admin-tls-client-ca configure the admin listener: set -admin-addr too")
	}
	if cfg.AdminTLS.Enabled() && (cfg.AdminTLS.Cert == "" || cfg.AdminTLS.Key == "") {
		return Config{}, errors.New("-admin-tls-cert and -admin-tls-key go together (and -admin-tls-client-ca needs them)")
	}
	if cfg.AdminToken = getenv(EnvAdminToken); cfg.AdminAddr != "" && cfg.AdminToken == "" {
		return Config{}, fmt.Errorf("-admin-addr needs %s: the admin service resets quotas, so it is never served without a token", EnvAdminToken)
	}
	r, err := serving.RedisFromEnv(getenv)
	if err != nil {
		return Config{}, err
	}
	cfg.RedisURL, cfg.RedisClusterAddrs, cfg.RedisSentinelAddrs, cfg.RedisSentinelMaster = r.URL, r.ClusterAddrs, r.SentinelAddrs, r.SentinelMaster
	return cfg, nil
}

// lookup finds the value whose String() is name.
func lookup[T fmt.Stringer](values []T, name string) (T, bool) {
	for _, v := range values {
		if v.String() == name {
			return v, true
		}
	}
	var zero T
	return zero, false
}

func names[T fmt.Stringer](values []T) string {
	s := make([]string, len(values))
	for i, v := range values {
		s[i] = v.String()
	}
	return strings.Join(s, ", ")
}

// Run listens on cfg.Addr and serves until ctx is done; see Serve.
func Run(ctx context.Context, cfg Config, logOut io.Writer) error {
	lis, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	return Serve(ctx, cfg, lis, logOut)
}

// Serve serves the rate-limited echo service and the health service on lis
// and, when cfg.HTTPAddr is set, Echo over Connect and HTTPRoute on a
// listener there; see ServeListeners.
func Serve(ctx context.Context, cfg Config, lis net.Listener, logOut io.Writer) error {
	var httpLis net.Listener
	if cfg.HTTPAddr != "" {
		var err error
		if httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			lis.Close()
			return fmt.Errorf("-http-addr: %w", err)
		}
	}
	return ServeListeners(ctx, cfg, lis, httpLis, logOut)
}

// ServeListeners serves the rate-limited echo service and the health
// service on lis and, when httpLis is not nil, the handler of
// NewHTTPHandler on httpLis, all behind one Limiter, until ctx is done;
// then stops gracefully: health turns NOT_SERVING, new calls are refused,
// running ones get cfg.ShutdownTimeout to finish before they are
// cancelled. It logs to logOut, starting with the store it uses and
// "listening on ADDR". It returns nil after a shutdown caused by ctx, and
// closes both listeners in every case.
func ServeListeners(ctx context.Context, cfg Config, lis, httpLis net.Listener, logOut io.Writer) error {
	logger := log.New(logOut, "", log.LstdFlags)
	fail := func(err error) error {
		lis.Close()
		if httpLis != nil {
			httpLis.Close()
		}
		return err
	}
	redisCfg := serving.Redis{URL: cfg.RedisURL, ClusterAddrs: cfg.RedisClusterAddrs, SentinelAddrs: cfg.RedisSentinelAddrs, SentinelMaster: cfg.RedisSentinelMaster}
	st, closeStore, err := redisCfg.Store(ctx, logger)
	if err != nil {
		return fail(err)
	}
	defer closeStore()

	var limiterOpts []func(*engine.Config)
	var provider metric.MeterProvider // nil: otel's global one
	if cfg.MetricsAddr != "" {
		mp, stopMetrics, err := serving.ServeMetrics(ctx, cfg.MetricsAddr, logger, nil)
		if err != nil {
			return fail(err)
		}
		defer stopMetrics()
		provider = mp
		limiterOpts = append(limiterOpts, func(c *engine.Config) { c.MeterProvider = provider })
	}

	lim, err := NewLimiter(st, cfg, limiterOpts...)
	if err != nil {
		return fail(err)
	}
	defer lim.Close(context.Background())
	srv, hs := NewServerFor(lim, cfg)
	logger.Printf("rule %s: %s per value of metadata %q on %s and %s; fail mode %s", RuleName, cfg.Limit, cfg.TenantHeader, echo.AllMethods, HTTPRoute, cfg.FailMode)
	if cfg.AdminAddr != "" {
		stopAdmin, err := serveAdmin(lim, cfg, logger, provider)
		if err != nil {
			return fail(err)
		}
		defer stopAdmin()
	}
	if httpLis != nil {
		h, err := NewHTTPHandler(lim)
		if err != nil {
			return fail(err)
		}
		stopHTTP := serveHTTP(ctx, newHTTPServer(h), httpLis, cfg.ShutdownTimeout, logger)
		defer stopHTTP()
		logger.Printf("Connect, gRPC-Web and HTTP (%s) on http://%s", HTTPRoute, httpLis.Addr())
	}
	logger.Printf("listening on %s (plaintext)", lis.Addr())

	err = serving.Serve(ctx, srv, hs, lis, cfg.ShutdownTimeout, logger, nil, nil)
	// The calls have ended: deliver what they owe the store (settlements,
	// seat releases) before the store closes.
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if cerr := lim.Close(closeCtx); cerr != nil {
		logger.Printf("limiter: %v", cerr)
	}
	return err
}

// serveHTTP serves srv on lis until stop, which shuts it down, waiting up
// to timeout for running requests.
func serveHTTP(ctx context.Context, srv *http.Server, lis net.Listener, timeout time.Duration, logger *log.Logger) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("http: %v", err)
		}
	}()
	return func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			srv.Close()
		}
		<-done
	}
}

// NewServer builds the gRPC server with its interceptor chain around st and
// registers the echo, health and server reflection services; the health
// server reports SERVING for the whole server and for the echo service.
// Options in opts are added to the limiter's own. Its Limiter is never
// closed: on a Redis store, use NewLimiter and NewServerFor, and close it.
func NewServer(st tollgate.Store, cfg Config, opts ...func(*engine.Config)) (*grpc.Server, *health.Server, error) {
	lim, err := NewLimiter(st, cfg, opts...)
	if err != nil {
		return nil, nil, err
	}
	srv, hs := NewServerFor(lim, cfg)
	return srv, hs, nil
}

// NewLimiter returns the server's engine on st, which every door of the
// server asks (gRPC, Connect, HTTP), configured by cfg and then by opts
// (under -fail-mode local, with a Memory store to decide in while st
// cannot). Close it when the server stops.
func NewLimiter(st tollgate.Store, cfg Config, opts ...func(*engine.Config)) (*engine.Limiter, error) {
	c := engine.Config{Rules: []engine.Rule{tenantRule(cfg)}, StoreTimeout: cfg.StoreTimeout, AdmittedTrailers: true}
	if cfg.FailMode == engine.FailLocal {
		local, err := store.NewMemory()
		if err != nil {
			return nil, err
		}
		c.LocalStore = local
	}
	for _, o := range opts {
		o(&c)
	}
	return engine.New(st, c)
}

// NewServerFor is NewServer around an engine of NewLimiter: its gRPC door.
func NewServerFor(eng *engine.Limiter, cfg Config) (*grpc.Server, *health.Server) {
	lim := interceptor.For(eng)
	limited := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return c.Service != healthpb.Health_ServiceDesc.ServiceName
	})
	srv := grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		grpc.ChainUnaryInterceptor(
			recovery.UnaryServerInterceptor(),
			selector.UnaryServerInterceptor(lim.UnaryServerInterceptor(), limited),
		),
		grpc.ChainStreamInterceptor(
			recovery.StreamServerInterceptor(),
			selector.StreamServerInterceptor(lim.StreamServerInterceptor(), limited),
		),
	)
	echo.Register(srv, &echo.Server{Before: flaky(cfg.Flaky)})
	hs := health.NewServer()
	hs.SetServingStatus(echo.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	// Reflection lets grpcurl and clients in other languages find the
	// service, and the error details of a denial, without a .proto at hand.
	reflection.Register(srv)
	return srv, hs
}

// flaky returns the echo hook that fails the fraction p of first attempts.
func flaky(p float64) func(context.Context, string) error {
	if p <= 0 {
		return nil
	}
	return func(ctx context.Context, _ string) error {
		if len(metadata.ValueFromIncomingContext(ctx, "grpc-previous-rpc-attempts")) > 0 {
			return nil
		}
		if rand.Float64() < p {
			return status.Error(codes.Unavailable, "flaky: this first attempt fails on purpose; retry it")
		}
		return nil
	}
}
