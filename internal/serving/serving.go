// Package serving holds what the example server and tollgate-rls share as
// commands: the store the environment names, the Prometheus endpoint for
// their OpenTelemetry metrics, and a graceful stop.
package serving

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/store"
)

// Environment variables that select a Redis store.
const (
	// EnvRedisURL names a single Redis node, as a URL redis.ParseURL
	// accepts ("redis://user:pass@host:6379/0").
	EnvRedisURL = "REDIS_URL"
	// EnvRedisClusterAddrs names the seed nodes of a Redis Cluster,
	// comma-separated host:port pairs.
	EnvRedisClusterAddrs = "REDIS_CLUSTER_ADDRS"
	// EnvRedisSentinelAddrs names Sentinels, comma-separated host:port
	// pairs; EnvRedisSentinelMaster names the primary they watch.
	EnvRedisSentinelAddrs = "REDIS_SENTINEL_ADDRS"
	// EnvRedisSentinelMaster is the Sentinel name of the primary.
	EnvRedisSentinelMaster = "REDIS_SENTINEL_MASTER"
)

// EnvHelp is one sentence naming the variables, for usage texts.
var EnvHelp = fmt.Sprintf("The store is in-process unless %s (one node), %s (a Cluster, comma-separated seeds) or %s with %s (Sentinel) names a Redis.",
	EnvRedisURL, EnvRedisClusterAddrs, EnvRedisSentinelAddrs, EnvRedisSentinelMaster)

// Redis says which Redis, if any, holds the store. The zero value means the
// in-process Memory store.
type Redis struct {
	URL            string   // one node
	ClusterAddrs   []string // seeds of a Cluster
	SentinelAddrs  []string // Sentinels watching SentinelMaster
	SentinelMaster string
	// Addr names one node by address instead of URL: host:port, or a Unix
	// socket's path when Network is "unix".
	Addr, Network string
	// Username and Password authenticate every node (AUTH);
	// SentinelPassword the Sentinels. Set, they win over the URL's.
	Username, Password, SentinelPassword string
	// TLS, when not nil, is the TLS configuration of every connection.
	TLS *tls.Config
	// PoolSize bounds each node's connection pool (0: go-redis's default).
	PoolSize int
	// DialTimeout bounds connecting (0: go-redis's default).
	DialTimeout time.Duration
	// KeyPrefix is prepended to every key the store writes
	// (store.WithPrefix).
	KeyPrefix string
}

// Describe names r's Redis for logs and errors, without credentials.
func (r Redis) Describe() string {
	switch {
	case r.URL != "":
		if opt, err := redis.ParseURL(r.URL); err == nil {
			return opt.Addr
		}
		return EnvRedisURL
	case r.Addr != "":
		return r.Addr
	case len(r.ClusterAddrs) > 0:
		return strings.Join(r.ClusterAddrs, ",")
	case len(r.SentinelAddrs) > 0:
		return r.SentinelMaster + " at " + strings.Join(r.SentinelAddrs, ",")
	}
	return "in-process memory"
}

// RedisFromEnv reads the variables above through getenv. Naming more than
// one kind of Redis, or Sentinels without a primary, is an error.
func RedisFromEnv(getenv func(string) string) (Redis, error) {
	r := Redis{
		URL:            getenv(EnvRedisURL),
		ClusterAddrs:   list(getenv(EnvRedisClusterAddrs)),
		SentinelAddrs:  list(getenv(EnvRedisSentinelAddrs)),
		SentinelMaster: getenv(EnvRedisSentinelMaster),
	}
	named := 0
	for _, set := range []bool{r.URL != "", len(r.ClusterAddrs) > 0, len(r.SentinelAddrs) > 0} {
		if set {
			named++
		}
	}
	switch {
	case named > 1:
		return Redis{}, fmt.Errorf("more than one of %s, %s and %s is set: choose one", EnvRedisURL, EnvRedisClusterAddrs, EnvRedisSentinelAddrs)
	case len(r.SentinelAddrs) > 0 && r.SentinelMaster == "":
		return Redis{}, fmt.Errorf("%s needs %s, the name of the primary", EnvRedisSentinelAddrs, EnvRedisSentinelMaster)
	}
	return r, nil
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

// Store returns the store r names and a function that releases it. The
// Redis client is the limiter's own: the store deadline reaches the socket
// (ContextTimeoutEnabled) and its other commands get one attempt
// (MaxRetries -1); the store never lets go-redis re-send its scripts. A
// Cluster client keeps MaxRedirects, to follow MOVED during a failover. An
// unreachable Redis is logged, not fatal: the fail mode covers it, as it
// would if Redis went away later.
func (r Redis) Store(ctx context.Context, logger *log.Logger) (tollgate.Store, func(), error) {
	var client redis.UniversalClient
	switch {
	case r.URL != "":
		opt, err := redis.ParseURL(r.URL)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", EnvRedisURL, err)
		}
		r.single(opt)
		client = redis.NewClient(opt)
		logger.Printf("store: Redis at %s (%s)", opt.Addr, EnvRedisURL)
	case r.Addr != "":
		opt := &redis.Options{Network: r.Network, Addr: r.Addr}
		r.single(opt)
		client = redis.NewClient(opt)
		logger.Printf("store: Redis at %s (%s)", r.Addr, cmp.Or(r.Network, "tcp"))
	case len(r.ClusterAddrs) > 0:
		client = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: r.ClusterAddrs, ContextTimeoutEnabled: true, MaxRetries: -1,
			Username: r.Username, Password: r.Password, TLSConfig: r.TLS, PoolSize: r.PoolSize, DialTimeout: r.DialTimeout,
		})
		logger.Printf("store: Redis Cluster seeded by %s", strings.Join(r.ClusterAddrs, ","))
	case len(r.SentinelAddrs) > 0:
		client = redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: r.SentinelMaster, SentinelAddrs: r.SentinelAddrs, ContextTimeoutEnabled: true, MaxRetries: -1,
			Username: r.Username, Password: r.Password, SentinelPassword: r.SentinelPassword, TLSConfig: r.TLS, PoolSize: r.PoolSize, DialTimeout: r.DialTimeout,
		})
		logger.Printf("store: Redis primary %q from Sentinels %s", r.SentinelMaster, strings.Join(r.SentinelAddrs, ","))
	default:
		logger.Printf("store: in-process memory (set %s, %s or %s for Redis)", EnvRedisURL, EnvRedisClusterAddrs, EnvRedisSentinelAddrs)
		st, err := store.NewMemory()
		if err != nil {
			return nil, nil, err
		}
		return st, func() {}, nil
	}
	// The store before any command: it chains its hooks into the client's
	// options, read as connections open.
	var opts []store.RedisOption
	if r.KeyPrefix != "" {
		opts = append(opts, store.WithPrefix(r.KeyPrefix))
	}
	st, err := store.NewRedis(client, opts...)
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := client.Ping(pingCtx).Err(); err != nil {
		logger.Printf("warning: Redis does not answer (%v); the fail mode applies until it does", err)
	}
	return st, func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := st.Close(closeCtx); err != nil {
			logger.Printf("closing the Redis store: %v", err)
		}
		if err := client.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			logger.Printf("closing Redis client: %v", err)
		}
	}, nil
}

// single applies r's settings to one node's options: the limiter's own
// client (see Store).
func (r Redis) single(opt *redis.Options) {
	opt.ContextTimeoutEnabled, opt.MaxRetries = true, -1
	if r.Username != "" {
		opt.Username = r.Username
	}
	if r.Password != "" {
		opt.Password = r.Password
	}
	if r.TLS != nil {
		opt.TLSConfig = r.TLS
	}
	if r.PoolSize > 0 {
		opt.PoolSize = r.PoolSize
	}
	if r.DialTimeout > 0 {
		opt.DialTimeout = r.DialTimeout
	}
}

// MetricsPath is the HTTP path ServeMetrics serves on.
const MetricsPath = "/metrics"

// ServeMetrics listens on addr and serves, on MetricsPath, the metrics
// recorded through the returned provider in the Prometheus text format,
// and the extra handlers at their paths, until stop is called; stop waits
// for the server to finish.
func ServeMetrics(ctx context.Context, addr string, logger *log.Logger, extra map[string]http.Handler) (provider metric.MeterProvider, stop func(), err error) {
	return ServeMetricsWith(ctx, addr, logger, MetricsOptions{Extra: extra})
}

// MetricsOptions are ServeMetricsWith's settings.
type MetricsOptions struct {
	// Path is where the metrics are served (empty: MetricsPath).
	Path string
	// Extra handlers are served at their paths.
	Extra map[string]http.Handler
	// Collectors are served beside the provider's metrics, in the same
	// exposition: metric families under names of their own.
	Collectors []prometheus.Collector
}

// ServeMetricsWith is ServeMetrics with o's path, handlers and collectors.
func ServeMetricsWith(ctx context.Context, addr string, logger *log.Logger, o MetricsOptions) (provider metric.MeterProvider, stop func(), err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics listener: %w", err)
	}
	// A registry of its own: only the limiter's metrics, not the Go
	// runtime's that the default registry carries.
	reg := prometheus.NewRegistry()
	for _, c := range o.Collectors {
		if err := reg.Register(c); err != nil {
			lis.Close()
			return nil, nil, err
		}
	}
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		lis.Close()
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	mux := http.NewServeMux()
	path := cmp.Or(o.Path, MetricsPath)
	mux.Handle(path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	for p, h := range o.Extra {
		mux.Handle(p, h)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("metrics: %v", err)
		}
	}()
	logger.Printf("metrics on http://%s%s", lis.Addr(), path)
	return mp, func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		srv.Shutdown(shutdownCtx)
		<-done
		mp.Shutdown(shutdownCtx)
	}, nil
}

// Serve serves srv on lis until ctx is done, calling onHangup (when not nil)
// each time hangup receives, then stops gracefully: hs turns NOT_SERVING,
// new calls are refused, and running ones get timeout to finish before they
// are cancelled. It returns nil after a stop caused by ctx, even one that
// came before srv began serving.
func Serve(ctx context.Context, srv *grpc.Server, hs *health.Server, lis net.Listener, timeout time.Duration, logger *log.Logger, hangup <-chan os.Signal, onHangup func()) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	for done := false; !done; {
		select {
		case err := <-served:
			return fmt.Errorf("serve: %w", err)
		case <-hangup:
			if onHangup != nil {
				onHangup()
			}
		case <-ctx.Done():
			done = true
		}
	}
	logger.Printf("shutting down (waiting up to %s for running calls)", timeout)
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		logger.Printf("calls still running after %s: cancelling them", timeout)
		srv.Stop()
		<-stopped
	}
	// A stop that came before Serve began makes it return
	// grpc.ErrServerStopped (it closes lis then): the stop ctx asked for.
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve: %w", err)
	}
	logger.Printf("stopped")
	return nil
}
