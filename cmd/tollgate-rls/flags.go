package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/serving"
	"github.com/tollgate/tollgate/internal/storecall"
	"github.com/tollgate/tollgate/rls"
)

// The configuration sources of CONFIG_TYPE.
const (
	configFile = "FILE"
	configXDS  = "GRPC_XDS_SOTW"
)

// config is everything the command is configured with.
type config struct {
	// reference: started without -config, every setting comes from
	// envoyproxy/ratelimit's variables and their defaults.
	reference bool

	dir string       // the configuration directory; "" when xds is set
	xds *xdsSettings // the xDS server the configuration comes from

	network, addr   string // the gRPC listener ("unix" with GRPC_UDS)
	httpAddr        string // /healthcheck; "" for none
	metricsAddr     string
	metricsPath     string
	storeFail       rls.StoreFailAnswer
	storeTimeout    time.Duration
	headers         bool
	headerNames     [3]string
	shadow          bool
	quotaMode       bool
	countOver       bool
	metadata        bool
	nearRatio       float32
	healthyOnConfig bool
	forceStart      bool
	maxConnAge      time.Duration
	maxConnAgeGrace time.Duration
	shutdownTimeout time.Duration
	tls             serving.TLSFiles
	redis           serving.Redis
	tracing         tracingSettings
	quotaReports    int
	quotaRebalance  time.Duration
	// notes are the settings the command cannot honour as set, logged at
	// start.
	notes []string
}

func parseFlags(args []string, getenv func(string) string, errOut io.Writer) (config, error) {
	fs := flag.NewFlagSet("tollgate-rls", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var c config
	var failMode string
	fs.StringVar(&c.dir, "config", "", "directory of envoyproxy/ratelimit YAML files, one per domain; without it, every setting comes from envoyproxy/ratelimit's environment variables and their defaults")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8081", "TCP address to listen on (GRPC_HOST:GRPC_PORT)")
	fs.StringVar(&c.httpAddr, "http-addr", "", "TCP address of the HTTP listener serving /healthcheck (HOST:PORT; empty: none)")
	fs.StringVar(&failMode, "fail-mode", "closed", "when the store cannot decide: closed, also spelled error (UNAVAILABLE: Envoy's failure_mode_deny decides) or open (answer OK)")
	fs.DurationVar(&c.storeTimeout, "store-timeout", storecall.DefaultTimeout, "how long a request waits for the store before the fail mode applies")
	fs.BoolVar(&c.headers, "response-headers", false, "add the limit, remaining and reset headers to responses (LIMIT_RESPONSE_HEADERS_ENABLED)")
	fs.StringVar(&c.headerNames[0], "limit-header", "", "name of the limit header (LIMIT_LIMIT_HEADER; empty: x-ratelimit-limit)")
	fs.StringVar(&c.headerNames[1], "remaining-header", "", "name of the remaining header (LIMIT_REMAINING_HEADER; empty: x-ratelimit-remaining)")
	fs.StringVar(&c.headerNames[2], "reset-header", "", "name of the reset header (LIMIT_RESET_HEADER; empty: x-ratelimit-reset)")
	fs.BoolVar(&c.shadow, "shadow-mode", false, "decide and debit as usual but always answer OK (SHADOW_MODE)")
	fs.BoolVar(&c.countOver, "count-over-limit", false, "count every descriptor's hits even over its limit, as envoyproxy/ratelimit does (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false); without it a refused request counts none")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 5*time.Second, "how long a graceful stop waits for running calls")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "TCP address to serve Prometheus metrics on, at "+serving.MetricsPath+", and the loaded configuration at "+configPath+" (USE_PROMETHEUS, PROMETHEUS_ADDR; empty: none)")
	fs.StringVar(&c.tls.Cert, "tls-cert", "", "PEM certificate to serve TLS with (with -tls-key; reloaded when the file changes) (GRPC_SERVER_TLS_CERT)")
	fs.StringVar(&c.tls.Key, "tls-key", "", "PEM private key of -tls-cert (GRPC_SERVER_TLS_KEY)")
	fs.StringVar(&c.tls.ClientCA, "tls-client-ca", "", "PEM CA that must have signed every client's certificate (mutual TLS) (GRPC_CLIENT_TLS_CACERT or GRPC_SERVER_TLS_CA_CERT)")
	fs.IntVar(&c.quotaReports, "quota-assignment-reports", 3, "rate limit quota service: how many report intervals an assignment lives without another report")
	fs.DurationVar(&c.quotaRebalance, "quota-rebalance", time.Second, "rate limit quota service: how often each stream's assignments are computed again between reports (0: only at reports)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: tollgate-rls [-config DIR] [flags]\n\nEnvoy's rate limit service over a tollgate store. %s\nA change to the configuration directory, or SIGHUP, reloads it. Started without -config, it reads envoyproxy/ratelimit's environment (CONFIG_TYPE=FILE or GRPC_XDS_SOTW, REDIS_URL, ...) as that server does; a flag wins over its variable.\n\n", serving.EnvHelp)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.storeTimeout <= 0 { // rls.Options reads 0 as its default
		return config{}, fmt.Errorf("-store-timeout must be > 0, got %s", c.storeTimeout)
	}
	if c.quotaReports < 1 { // rls.QuotaOptions reads 0 as its default
		return config{}, fmt.Errorf("-quota-assignment-reports must be at least 1, got %d", c.quotaReports)
	}
	if c.quotaRebalance < 0 { // 0 is off here; rls.QuotaOptions says off with a negative interval
		return config{}, fmt.Errorf("-quota-rebalance must be 0 (off) or more, got %s", c.quotaRebalance)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	env, err := readEnv(getenv)
	if err != nil {
		return config{}, err
	}
	c.reference = !given["config"]
	// take reports whether the variable decides a setting no flag gave:
	// it is set, or its default is the command's (started without -config).
	take := func(flagName string, vars ...string) bool {
		if given[flagName] {
			return false
		}
		for _, v := range vars {
			if env.set[v] {
				return true
			}
		}
		return c.reference
	}
	if err := c.fromEnv(env, getenv, take); err != nil {
		return config{}, err
	}
	switch failMode {
	case "closed", "error":
		c.storeFail = rls.AnswerUnavailable
	case "open":
		c.storeFail = rls.AnswerOK
	default:
		return config{}, fmt.Errorf("-fail-mode %q: want closed (or error) or open", failMode)
	}
	if c.tls.Enabled() && (c.tls.Cert == "" || c.tls.Key == "") {
		return config{}, errors.New("-tls-cert and -tls-key go together (and -tls-client-ca needs them)")
	}
	c.notes = env.notes(getenv, c.reference)
	return c, nil
}

// fromEnv takes every setting whose variable decides it (take) from env.
func (c *config) fromEnv(env envSettings, getenv func(string) string, take func(flagName string, vars ...string) bool) error {
	if take("addr", "GRPC_HOST", "GRPC_PORT", "GRPC_UDS") {
		c.network, c.addr = "tcp", net.JoinHostPort(env.GrpcHost, strconv.Itoa(env.GrpcPort))
		if env.GrpcUDS != "" {
			c.network, c.addr = "unix", env.GrpcUDS
		}
	}
	if take("http-addr", "HOST", "PORT") {
		c.httpAddr = net.JoinHostPort(env.Host, strconv.Itoa(env.Port))
	}
	if take("metrics-addr", "USE_PROMETHEUS") && env.UsePrometheus {
		c.metricsAddr, c.metricsPath = env.PrometheusAddr, env.PrometheusPath
	}
	if take("response-headers", "LIMIT_RESPONSE_HEADERS_ENABLED") {
		c.headers = env.HeadersEnabled
	}
	for i, h := range []struct{ flag, env, value string }{
		{"limit-header", "LIMIT_LIMIT_HEADER", env.LimitHeader},
		{"remaining-header", "LIMIT_REMAINING_HEADER", env.RemainingHeader},
		{"reset-header", "LIMIT_RESET_HEADER", env.ResetHeader},
	} {
		if take(h.flag, h.env) {
			c.headerNames[i] = h.value
		}
	}
	if take("shadow-mode", "SHADOW_MODE") {
		c.shadow = env.ShadowMode
	}
	if take("count-over-limit", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") {
		c.countOver = !env.StopIncrement
	}
	if take("tls-cert", "GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_SERVER_TLS_CA_CERT") && env.GrpcServerUseTLS {
		// envoyproxy/ratelimit requires client certificates only with
		// GRPC_CLIENT_TLS_CACERT; Envoy Gateway sets GRPC_SERVER_TLS_CA_CERT.
		// Either one requires them here.
		c.tls = serving.TLSFiles{Cert: env.GrpcServerTLSCert, Key: env.GrpcServerTLSKey, ClientCA: env.GrpcClientTLSCACert, ClientSAN: env.GrpcClientTLSSAN}
		if c.tls.ClientCA == "" {
			c.tls.ClientCA = env.GrpcServerTLSCACert
		}
		if c.tls.Cert == "" || c.tls.Key == "" {
			return errors.New("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
		}
	}
	c.quotaMode, c.metadata, c.nearRatio = env.QuotaMode, env.DynamicMetadata, env.NearLimitRatio
	c.healthyOnConfig, c.forceStart = env.HealthyOnConfig, env.ForceStart
	c.maxConnAge, c.maxConnAgeGrace = env.GrpcMaxConnectionAge, env.GrpcMaxConnectionAgeGrace
	c.tracing = tracingOf(env)
	if c.reference {
		switch strings.ToUpper(env.ConfigType) {
		case configFile:
			c.dir = filepath.Join(env.RuntimeRoot, env.RuntimeSub, env.RuntimeApp)
		case configXDS:
			x, err := xdsOf(env)
			if err != nil {
				return err
			}
			c.xds = x
		default:
			return fmt.Errorf("CONFIG_TYPE=%s: want %s or %s", env.ConfigType, configFile, configXDS)
		}
	}
	if strings.ToLower(env.BackendType) != "redis" {
		return fmt.Errorf("BACKEND_TYPE=%s: tollgate-rls decides in Redis (or in process): want redis", env.BackendType)
	}
	r, err := redisOf(env, getenv, c.reference)
	if err != nil {
		return err
	}
	c.redis = r
	return nil
}

// redisOf is the Redis the environment names: tollgate's REDIS_URL (a
// redis:// or rediss:// URL), REDIS_CLUSTER_ADDRS or REDIS_SENTINEL_ADDRS,
// or envoyproxy/ratelimit's REDIS_TYPE, REDIS_SOCKET_TYPE and REDIS_URL
// (host:port, a socket path, comma-separated nodes, or for a Sentinel
// "primary,sentinel1,sentinel2"), with REDIS_AUTH, REDIS_TLS*,
// REDIS_POOL_SIZE, REDIS_TIMEOUT and CACHE_KEY_PREFIX. No Redis named: the
// in-process store, unless started without -config, where REDIS_URL has
// envoyproxy/ratelimit's default.
func redisOf(env envSettings, getenv func(string) string, reference bool) (serving.Redis, error) {
	r, err := serving.RedisFromEnv(func(k string) string {
		if k == serving.EnvRedisURL && !strings.Contains(env.RedisURL, "://") {
			return "" // envoyproxy/ratelimit's form, read below
		}
		return getenv(k)
	})
	if err != nil {
		return serving.Redis{}, err
	}
	refURL := env.RedisURL != "" && !strings.Contains(env.RedisURL, "://") && (env.set["REDIS_URL"] || reference)
	if refURL {
		if r.URL != "" || len(r.ClusterAddrs) > 0 || len(r.SentinelAddrs) > 0 {
			return serving.Redis{}, fmt.Errorf("REDIS_URL=%s with %s or %s: choose one", env.RedisURL, serving.EnvRedisClusterAddrs, serving.EnvRedisSentinelAddrs)
		}
		nodes := strings.Split(env.RedisURL, ",")
		switch strings.ToUpper(env.RedisType) {
		case "SINGLE":
			r.Addr, r.Network = env.RedisURL, strings.ToLower(env.RedisSocketType)
			if !env.set["REDIS_SOCKET_TYPE"] && !strings.HasPrefix(env.RedisURL, "/") {
				r.Network = "tcp" // host:port: a socket is a path
			}
		case "CLUSTER":
			r.ClusterAddrs = nodes
		case "SENTINEL":
			if len(nodes) < 2 {
				return serving.Redis{}, fmt.Errorf("REDIS_TYPE=sentinel: REDIS_URL=%s, want the primary's name then the Sentinels, comma-separated", env.RedisURL)
			}
			r.SentinelMaster, r.SentinelAddrs = nodes[0], nodes[1:]
		default:
			return serving.Redis{}, fmt.Errorf("REDIS_TYPE=%s: want single, cluster or sentinel", env.RedisType)
		}
	}
	if r.URL == "" && r.Addr == "" && len(r.ClusterAddrs) == 0 && len(r.SentinelAddrs) == 0 {
		return r, nil // in process
	}
	if user, pass, ok := strings.Cut(env.RedisAuth, ":"); ok {
		r.Username, r.Password = user, pass
	} else {
		r.Password = env.RedisAuth
	}
	r.SentinelPassword = env.RedisSentinelAuth
	r.PoolSize, r.DialTimeout, r.KeyPrefix = env.RedisPoolSize, env.RedisTimeout, env.CacheKeyPrefix
	if env.RedisTLS {
		tc, err := redisTLS(env)
		if err != nil {
			return serving.Redis{}, err
		}
		r.TLS = tc
	}
	return r, nil
}

// redisTLS is the client TLS configuration of REDIS_TLS: the client
// certificate of REDIS_TLS_CLIENT_CERT and _KEY, the CA of
// REDIS_TLS_CACERT (else the system's).
func redisTLS(env envSettings) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: env.RedisTLSSkipHostname} //nolint:gosec // REDIS_TLS_SKIP_HOSTNAME_VERIFICATION, as the reference honours it
	if env.RedisTLSClientCert != "" || env.RedisTLSClientKey != "" {
		cert, err := tls.LoadX509KeyPair(env.RedisTLSClientCert, env.RedisTLSClientKey)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if env.RedisTLSCACert != "" {
		pool, err := certPool(env.RedisTLSCACert)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CACERT: %w", err)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// certPool reads a PEM file of certificates.
func certPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}
