package main

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// envSettings are envoyproxy/ratelimit's environment variables (its
// src/settings/settings.go) with its defaults, for every setting
// tollgate-rls has a counterpart for. Started without -config, the command
// takes every setting from them, as the real server does; with -config the
// variables that are set still apply where no flag says otherwise, and the
// flags' own defaults apply to the rest. unhonoured lists the variables
// that have no counterpart.
type envSettings struct {
	Host                      string        `env:"HOST" default:"0.0.0.0"`
	Port                      int           `env:"PORT" default:"8080"`
	GrpcUDS                   string        `env:"GRPC_UDS"`
	GrpcHost                  string        `env:"GRPC_HOST" default:"0.0.0.0"`
	GrpcPort                  int           `env:"GRPC_PORT" default:"8081"`
	GrpcMaxConnectionAge      time.Duration `env:"GRPC_MAX_CONNECTION_AGE" default:"24h"`
	GrpcMaxConnectionAgeGrace time.Duration `env:"GRPC_MAX_CONNECTION_AGE_GRACE" default:"1h"`
	GrpcServerUseTLS          bool          `env:"GRPC_SERVER_USE_TLS"`
	GrpcServerTLSCert         string        `env:"GRPC_SERVER_TLS_CERT"`
	GrpcServerTLSKey          string        `env:"GRPC_SERVER_TLS_KEY"`
	GrpcClientTLSCACert       string        `env:"GRPC_CLIENT_TLS_CACERT"`
	// GrpcServerTLSCACert is the name Envoy Gateway sets for the client CA;
	// envoyproxy/ratelimit itself does not read it.
	GrpcServerTLSCACert string `env:"GRPC_SERVER_TLS_CA_CERT"`
	GrpcClientTLSSAN    string `env:"GRPC_CLIENT_TLS_SAN"`

	LogLevel  string `env:"LOG_LEVEL" default:"WARN"`
	LogFormat string `env:"LOG_FORMAT" default:"text"`

	ConfigType  string `env:"CONFIG_TYPE" default:"FILE"`
	ForceStart  bool   `env:"FORCE_START_WITHOUT_INITIAL_CONFIG"`
	RuntimeRoot string `env:"RUNTIME_ROOT" default:"/srv/runtime_data/current"`
	RuntimeSub  string `env:"RUNTIME_SUBDIRECTORY"`
	RuntimeApp  string `env:"RUNTIME_APPDIRECTORY" default:"config"`
	IgnoreDots  bool   `env:"RUNTIME_IGNOREDOTFILES"`
	MergeDomain bool   `env:"MERGE_DOMAIN_CONFIG"`

	XDSNodeID         string            `env:"CONFIG_GRPC_XDS_NODE_ID" default:"default"`
	XDSNodeMetadata   string            `env:"CONFIG_GRPC_XDS_NODE_METADATA"`
	XDSServerURL      string            `env:"CONFIG_GRPC_XDS_SERVER_URL" default:"localhost:18000"`
	XDSHeaders        map[string]string `env:"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"`
	XDSUseTLS         bool              `env:"CONFIG_GRPC_XDS_SERVER_USE_TLS"`
	XDSClientCert     string            `env:"CONFIG_GRPC_XDS_CLIENT_TLS_CERT"`
	XDSClientKey      string            `env:"CONFIG_GRPC_XDS_CLIENT_TLS_KEY"`
	XDSServerCA       string            `env:"CONFIG_GRPC_XDS_SERVER_TLS_CACERT"`
	XDSServerSAN      string            `env:"CONFIG_GRPC_XDS_SERVER_TLS_SAN"`
	XDSBackoffInitial time.Duration     `env:"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL" default:"10s"`
	XDSBackoffMax     time.Duration     `env:"XDS_CLIENT_BACKOFF_MAX_INTERVAL" default:"60s"`
	XDSBackoffRandom  float64           `env:"XDS_CLIENT_BACKOFF_RANDOM_FACTOR" default:"0.5"`
	XDSBackoffJitter  bool              `env:"XDS_CLIENT_BACKOFF_JITTER" default:"true"`
	XDSMaxMsgSize     int               `env:"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"`

	UseStatsd       bool    `env:"USE_STATSD" default:"true"`
	UsePrometheus   bool    `env:"USE_PROMETHEUS"`
	PrometheusAddr  string  `env:"PROMETHEUS_ADDR" default:":9090"`
	PrometheusPath  string  `env:"PROMETHEUS_PATH" default:"/metrics"`
	NearLimitRatio  float32 `env:"NEAR_LIMIT_RATIO" default:"0.8"`
	CacheKeyPrefix  string  `env:"CACHE_KEY_PREFIX"`
	BackendType     string  `env:"BACKEND_TYPE" default:"redis"`
	StopIncrement   bool    `env:"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"`
	HeadersEnabled  bool    `env:"LIMIT_RESPONSE_HEADERS_ENABLED"`
	LimitHeader     string  `env:"LIMIT_LIMIT_HEADER" default:"RateLimit-Limit"`
	RemainingHeader string  `env:"LIMIT_REMAINING_HEADER" default:"RateLimit-Remaining"`
	ResetHeader     string  `env:"LIMIT_RESET_HEADER" default:"RateLimit-Reset"`
	HealthyOnConfig bool    `env:"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"`
	ShadowMode      bool    `env:"SHADOW_MODE"`
	QuotaMode       bool    `env:"QUOTA_MODE"`
	DynamicMetadata bool    `env:"RESPONSE_DYNAMIC_METADATA"`

	RedisSocketType      string        `env:"REDIS_SOCKET_TYPE" default:"unix"`
	RedisType            string        `env:"REDIS_TYPE" default:"SINGLE"`
	RedisURL             string        `env:"REDIS_URL" default:"/var/run/nutcracker/ratelimit.sock"`
	RedisPoolSize        int           `env:"REDIS_POOL_SIZE" default:"10"`
	RedisAuth            string        `env:"REDIS_AUTH"`
	RedisSentinelAuth    string        `env:"REDIS_SENTINEL_AUTH"`
	RedisTLS             bool          `env:"REDIS_TLS"`
	RedisTLSClientCert   string        `env:"REDIS_TLS_CLIENT_CERT"`
	RedisTLSClientKey    string        `env:"REDIS_TLS_CLIENT_KEY"`
	RedisTLSCACert       string        `env:"REDIS_TLS_CACERT"`
	RedisTLSSkipHostname bool          `env:"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"`
	RedisTimeout         time.Duration `env:"REDIS_TIMEOUT" default:"10s"`

	TracingEnabled    bool    `env:"TRACING_ENABLED"`
	TracingService    string  `env:"TRACING_SERVICE_NAME" default:"RateLimit"`
	TracingNamespace  string  `env:"TRACING_SERVICE_NAMESPACE"`
	TracingInstanceID string  `env:"TRACING_SERVICE_INSTANCE_ID"`
	TracingProtocol   string  `env:"TRACING_EXPORTER_PROTOCOL" default:"http"`
	TracingSampling   float64 `env:"TRACING_SAMPLING_RATE" default:"1"`

	// set holds the variables the environment sets (not empty).
	set map[string]bool
}

// readEnv fills the settings from getenv, each unset (or empty) variable
// taking its default. A value that does not parse is an error naming the
// variable.
func readEnv(getenv func(string) string) (envSettings, error) {
	var s envSettings
	s.set = map[string]bool{}
	v := reflect.ValueOf(&s).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		name := f.Tag.Get("env")
		if name == "" {
			continue
		}
		raw := getenv(name)
		if raw != "" {
			s.set[name] = true
		} else {
			raw = f.Tag.Get("default")
		}
		if err := setField(v.Field(i), raw); err != nil {
			return envSettings{}, fmt.Errorf("%s=%q: %w", name, raw, err)
		}
	}
	return s, nil
}

// setField parses raw into a field of one of envSettings' kinds.
func setField(f reflect.Value, raw string) error {
	switch f.Interface().(type) {
	case string:
		f.SetString(raw)
	case int:
		n := 0
		if raw != "" {
			var err error
			if n, err = strconv.Atoi(raw); err != nil {
				return fmt.Errorf("want an integer")
			}
		}
		f.SetInt(int64(n))
	case bool:
		b := false
		if raw != "" {
			var err error
			if b, err = strconv.ParseBool(raw); err != nil {
				return fmt.Errorf("want true or false")
			}
		}
		f.SetBool(b)
	case float32, float64:
		x, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return fmt.Errorf("want a number")
		}
		f.SetFloat(x)
	case time.Duration:
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("want a duration such as 10s")
		}
		f.SetInt(int64(d))
	case map[string]string:
		m := map[string]string{}
		for _, kv := range strings.Split(raw, ",") {
			if kv == "" {
				continue
			}
			k, val, ok := strings.Cut(kv, ":")
			if !ok {
				return fmt.Errorf("want key:value pairs separated by commas")
			}
			m[k] = val
		}
		f.Set(reflect.ValueOf(m))
	default:
		return fmt.Errorf("unsupported setting type %s", f.Type())
	}
	return nil
}

// unhonoured are envoyproxy/ratelimit's variables tollgate-rls has no
// counterpart for, with what it does instead: each one the environment
// sets is logged once at start.
var unhonoured = []struct{ names, instead string }{
	{"DEBUG_HOST DEBUG_PORT", "no debug listener: the loaded configuration is served at /rlconfig on the HTTP listener (PORT) and at /config with the metrics"},
	{"STATSD_HOST STATSD_PORT USE_DOG_STATSD USE_DOG_STATSD_MOGRIFIERS EXTRA_TAGS STATS_FLUSH_INTERVAL DISABLE_STATS", "no statsd: USE_PROMETHEUS=true serves the same metric families, and tollgate's own, at PROMETHEUS_ADDR"},
	{"PROMETHEUS_MAPPER_YAML", "the families of envoyproxy/ratelimit's default mapping are served; the file is not read"},
	{"EXPIRATION_JITTER_MAX_SECONDS", "every key expires when its window ends, no later"},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "the Redis store answers identities far over their limit from its own deny cache"},
	{"REDIS_PIPELINE_WINDOW REDIS_PIPELINE_LIMIT REDIS_POOL_ON_EMPTY_BEHAVIOR", "the store batches concurrent decisions into one script call by itself; a call waits for a connection"},
	{"REDIS_PERSECOND REDIS_PERSECOND_SOCKET_TYPE REDIS_PERSECOND_TYPE REDIS_PERSECOND_URL REDIS_PERSECOND_POOL_SIZE REDIS_PERSECOND_AUTH REDIS_PERSECOND_TLS REDIS_PERSECOND_SENTINEL_AUTH REDIS_PERSECOND_PIPELINE_WINDOW REDIS_PERSECOND_PIPELINE_LIMIT REDIS_PERSECOND_TIMEOUT REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "one Redis (REDIS_URL) holds every limit, per-second ones too"},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "/healthcheck does not follow Redis: while Redis is away the fail mode answers (-fail-mode)"},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "reconnections to the xDS server wait as XDS_CLIENT_BACKOFF_* say"},
}

// notes returns one line per setting the command cannot honour as set,
// saying what it does instead.
func (s envSettings) notes(getenv func(string) string, reference bool) []string {
	var out []string
	for _, u := range unhonoured {
		var named []string
		for _, n := range strings.Fields(u.names) {
			if getenv(n) != "" {
				named = append(named, n)
			}
		}
		if named != nil {
			out = append(out, strings.Join(named, ", ")+": "+u.instead)
		}
	}
	switch level := strings.ToLower(s.LogLevel); {
	case s.set["LOG_LEVEL"] && level != "info" && level != "debug" && level != "trace":
		out = append(out, "LOG_LEVEL="+s.LogLevel+": tollgate-rls logs its start, its configuration loads and its failures, at any level")
	case s.set["LOG_FORMAT"] && strings.ToLower(s.LogFormat) != "text":
		out = append(out, "LOG_FORMAT="+s.LogFormat+": tollgate-rls logs text lines")
	}
	if s.set["RUNTIME_IGNOREDOTFILES"] && !s.IgnoreDots || reference && !s.set["RUNTIME_IGNOREDOTFILES"] && s.ConfigType == configFile {
		out = append(out, "RUNTIME_IGNOREDOTFILES=false: files whose names start with a dot are skipped all the same")
	}
	if s.MergeDomain {
		out = append(out, "MERGE_DOMAIN_CONFIG=true: a domain in two files is refused, never merged")
	}
	if reference && s.UseStatsd && !s.UsePrometheus {
		out = append(out, "USE_STATSD=true (its default): no statsd; USE_PROMETHEUS=true serves the same metric families")
	}
	if s.StopIncrement {
		out = append(out, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true: a refused request counts no hit on any of its descriptors (all or nothing)")
	}
	return out
}
