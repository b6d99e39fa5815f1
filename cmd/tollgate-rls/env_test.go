package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/grpctest"
	"github.com/tollgate/tollgate/rls"
)

// envoyGateway is the environment Envoy Gateway gives its rate limit
// deployment (internal/infrastructure/kubernetes/ratelimit in
// envoyproxy/gateway), the certificates' paths aside.
func envoyGateway(certs string) map[string]string {
	return map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"LOG_LEVEL": "info", "USE_STATSD": "false", "CONFIG_TYPE": "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": certs + "/tls.crt", "GRPC_SERVER_TLS_KEY": certs + "/tls.key", "GRPC_SERVER_TLS_CA_CERT": certs + "/ca.crt",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": certs + "/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": certs + "/tls.key",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": certs + "/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.redis-system.svc.cluster.local:6379",
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "PROMETHEUS_MAPPER_YAML": "/etc/statsd-exporter/conf.yaml",
	}
}

// TestEnvoyGatewayEnvironment: started with Envoy Gateway's environment
// and no flag, every setting is envoyproxy/ratelimit's: its ports, mutual
// TLS (GRPC_SERVER_TLS_CA_CERT requires client certificates), xDS with its
// node and certificates, Redis over TCP, Prometheus, its counting and
// header names; the mapper file is noted as not read.
func TestEnvoyGatewayEnvironment(t *testing.T) {
	certs := writeTestCerts(t)
	env := envoyGateway(certs.dir)
	c, err := parseFlags(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case !c.reference || c.addr != "0.0.0.0:8081" || c.network != "tcp" || c.httpAddr != "0.0.0.0:8080":
		t.Errorf("listeners %s %s, http %s", c.network, c.addr, c.httpAddr)
	case c.metricsAddr != ":19001" || c.metricsPath != "/metrics":
		t.Errorf("metrics %s%s", c.metricsAddr, c.metricsPath)
	case c.tls.ClientCA != certs.dir+"/ca.crt" || c.tls.Mode() != "mutual TLS":
		t.Errorf("TLS %+v: want client certificates required", c.tls)
	case c.xds == nil || c.xds.url != "envoy-gateway:18001" || c.xds.node.GetId() != "envoy-ratelimit" || c.xds.tls == nil || c.xds.tls.ServerName != "envoy-gateway" || len(c.xds.tls.Certificates) != 1:
		t.Errorf("xDS %+v", c.xds)
	case c.redis.Addr != "redis.redis-system.svc.cluster.local:6379" || c.redis.Network != "tcp" || c.redis.PoolSize != 10:
		t.Errorf("Redis %+v", c.redis)
	case !c.countOver || !c.forceStart || c.storeFail != rls.AnswerUnavailable || c.headerNames[0] != "RateLimit-Limit":
		t.Errorf("semantics: count over %v, force start %v, %s, headers %v", c.countOver, c.forceStart, c.storeFail, c.headerNames)
	case c.maxConnAge != 24*time.Hour || c.xds.backoff.initial != 10*time.Second:
		t.Errorf("durations %s %s", c.maxConnAge, c.xds.backoff.initial)
	}
	notes := strings.Join(c.notes, "\n")
	if !strings.Contains(notes, "PROMETHEUS_MAPPER_YAML:") || strings.Contains(notes, "LOG_LEVEL") || strings.Contains(notes, "USE_STATSD") {
		t.Errorf("notes:\n%s\nwant PROMETHEUS_MAPPER_YAML only", notes)
	}
}

// TestFlagsWinOverVariables: a flag wins over its variable; with -config,
// an unset variable leaves the flag's default, a set one applies.
func TestFlagsWinOverVariables(t *testing.T) {
	env := map[string]string{"GRPC_PORT": "9000", "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "REDIS_URL": "redis://127.0.0.1:1/0"}
	c, err := parseFlags([]string{"-config", "d", "-addr", "127.0.0.1:7"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.reference || c.addr != "127.0.0.1:7" || !c.headers || c.headerNames[0] != "" || c.httpAddr != "" || c.countOver || c.redis.URL != env["REDIS_URL"] {
		t.Fatalf("%+v", c)
	}
	c, err = parseFlags([]string{"-config", "d"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil || c.addr != "0.0.0.0:9000" {
		t.Fatalf("GRPC_PORT without -addr: %s %v", c.addr, err)
	}
	// envoyproxy/ratelimit's Redis forms.
	for value, want := range map[string]string{"SINGLE|/tmp/r.sock|": "unix /tmp/r.sock", "SINGLE|r:6379|": "tcp r:6379", "SINGLE|r:6379|unix": "unix r:6379", "CLUSTER|a:1,b:2|": "cluster a:1,b:2", "sentinel|m,s1:1,s2:2|": "sentinel m s1:1,s2:2"} {
		p := strings.Split(value, "|")
		e := map[string]string{"REDIS_TYPE": p[0], "REDIS_URL": p[1], "REDIS_SOCKET_TYPE": p[2], "REDIS_AUTH": "u:pw"}
		c, err := parseFlags(nil, func(k string) string { return e[k] }, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", value, err)
		}
		r := c.redis
		got := r.Network + " " + r.Addr
		switch {
		case len(r.ClusterAddrs) > 0:
			got = "cluster " + strings.Join(r.ClusterAddrs, ",")
		case len(r.SentinelAddrs) > 0:
			got = "sentinel " + r.SentinelMaster + " " + strings.Join(r.SentinelAddrs, ",")
		}
		if got != want || r.Username != "u" || r.Password != "pw" {
			t.Errorf("%s: %s (%s:%s), want %s", value, got, r.Username, r.Password, want)
		}
	}
}

// testCerts are the files of a Kubernetes secret as Envoy Gateway mounts
// it: tls.crt and tls.key (serving and identifying a client alike) and
// ca.crt.
type testCerts struct {
	dir string
	ca  *grpctest.CA
}

func writeTestCerts(t *testing.T) testCerts {
	t.Helper()
	c := testCerts{dir: t.TempDir(), ca: grpctest.NewCA(t, "envoy-gateway test CA")}
	cert, key := c.ca.IssueBoth(7, "localhost", "envoy-gateway")
	for name, data := range map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": c.ca.PEM} {
		writeAtomically(t, filepath.Join(c.dir, name), data)
	}
	return c
}
