package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	xds "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// GatewayNodeID is the xDS node id Envoy Gateway gives its rate limit
// service (CONFIG_GRPC_XDS_NODE_ID).
const GatewayNodeID = "envoy-ratelimit"

// Gateway plays Envoy Gateway's part for a rate limit service: the
// certificates of its secret (one certificate serving and identifying a
// client alike, and the CA, in a directory as Kubernetes mounts them), and
// its controller's xDS server (go-control-plane's SotW server, in process,
// requiring client certificates) that pushes RateLimitConfig snapshots. It
// starts servers as Envoy Gateway's deployment does: the binary with the
// environment alone (GatewayEnv).
type Gateway struct {
	Certs *GatewayCerts
	// XDSAddr is the xDS server's address, 127.0.0.1:port.
	XDSAddr string

	cache cache.SnapshotCache
	srv   *grpc.Server
	done  chan struct{}

	mu       sync.Mutex
	acked    map[string]bool // versions a client acknowledged
	nacks    int             // requests carrying an error
	lastNack string          // the last error
}

// NewGateway writes the certificates and starts the xDS server.
func NewGateway() (*Gateway, error) {
	certs, err := NewGatewayCerts()
	if err != nil {
		return nil, err
	}
	g := &Gateway{Certs: certs, acked: map[string]bool{}, done: make(chan struct{})}
	g.cache = cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		certs.Remove()
		return nil, err
	}
	g.XDSAddr = lis.Addr().String()
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{certs.Pair}, ClientCAs: certs.Pool, ClientAuth: tls.RequireAndVerifyClientCert}
	g.srv = grpc.NewServer(grpc.Creds(credentials.NewTLS(tc)))
	discoverypb.RegisterAggregatedDiscoveryServiceServer(g.srv, xds.NewServer(context.Background(), g.cache, xds.CallbackFuncs{StreamRequestFunc: g.observe}))
	go func() { defer close(g.done); _ = g.srv.Serve(lis) }()
	return g, nil
}

// observe records what each client request says of the last response.
func (g *Gateway) observe(_ int64, req *discoverypb.DiscoveryRequest) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if req.GetErrorDetail() != nil {
		g.nacks++
		g.lastNack = req.GetErrorDetail().GetMessage()
	} else if v := req.GetVersionInfo(); v != "" {
		g.acked[v] = true
	}
	return nil
}

// Push sets the snapshot of version for GatewayNodeID.
func (g *Gateway) Push(version string, configs ...*rlsconf.RateLimitConfig) error {
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		return err
	}
	return g.cache.SetSnapshot(context.Background(), GatewayNodeID, snap)
}

// Acked reports whether a client acknowledged version.
func (g *Gateway) Acked(version string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.acked[version]
}

// Nacks returns how many requests carried an error, and the last one's.
func (g *Gateway) Nacks() (int, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.nacks, g.lastNack
}

// Close stops the xDS server and removes the certificates.
func (g *Gateway) Close() {
	g.srv.Stop()
	<-g.done
	g.Certs.Remove()
}

// GatewayEnv is the environment Envoy Gateway gives the rate limit
// deployment (envoyproxy/gateway's internal/infrastructure/kubernetes/
// ratelimit), with this Gateway's certificates and xDS server, the Redis at
// redisAddr, and the listeners on the loopback ports given (Envoy Gateway
// leaves them at 8081, 8080 and 6070, and sets PROMETHEUS_ADDR=:19001):
// ports[0] gRPC, ports[1] HTTP, ports[2] debug, ports[3] Prometheus.
// PROMETHEUS_MAPPER_YAML is left out: Envoy Gateway points it at a mounted
// copy of envoyproxy/ratelimit's default mapping, which the server uses
// without it (a path to no file would leave the reference unmapped).
func (g *Gateway) GatewayEnv(redisAddr string, ports [4]int) []string {
	c := g.Certs.Dir
	return []string{
		"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info", "USE_STATSD=false", "CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL=localhost:" + portOf(g.XDSAddr), "CONFIG_GRPC_XDS_NODE_ID=" + GatewayNodeID,
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + c + "/tls.crt", "GRPC_SERVER_TLS_KEY=" + c + "/tls.key", "GRPC_SERVER_TLS_CA_CERT=" + c + "/ca.crt",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + c + "/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + c + "/tls.key",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + c + "/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:" + strconv.Itoa(ports[3]),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(ports[0]), "HOST=127.0.0.1", "PORT=" + strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ports[2]),
	}
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// GatewayServer is a rate limit service process started by a Gateway.
type GatewayServer struct {
	// Name says which server it is: the binary's base name.
	Name string
	// GRPCAddr, HTTPAddr and MetricsAddr are its listeners.
	GRPCAddr, HTTPAddr, MetricsAddr string
	// Log is what it printed.
	Log *SyncBuffer

	g    *Gateway
	proc *process
}

// Start runs bin with GatewayEnv alone, from an empty directory, and
// returns once its /healthcheck answers 200 (within 30 s) or it exited.
// extra variables are appended (a later one wins).
func (g *Gateway) Start(bin, redisAddr string, extra ...string) (*GatewayServer, error) {
	ps, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tollgate-gateway-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = append(g.GatewayEnv(redisAddr, [4]int(ps)), extra...)
	s := &GatewayServer{
		Name: filepath.Base(bin), g: g, Log: &SyncBuffer{},
		GRPCAddr: "127.0.0.1:" + strconv.Itoa(ps[0]), HTTPAddr: "127.0.0.1:" + strconv.Itoa(ps[1]), MetricsAddr: "127.0.0.1:" + strconv.Itoa(ps[3]),
	}
	cmd.Stdout, cmd.Stderr = s.Log, s.Log
	if s.proc, err = startProcess(cmd, dir, s.Name); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _, err := s.Get("/healthcheck"); err == nil && code == http.StatusOK {
			return s, nil
		}
		select {
		case <-s.proc.done:
			return nil, fmt.Errorf("%s exited at start:\n%s", s.Name, s.Log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("%s: /healthcheck does not answer 200 within 30s:\n%s", s.Name, s.Log.String())
		}
	}
}

// Exited returns a channel closed when the process has exited.
func (s *GatewayServer) Exited() <-chan struct{} { return s.proc.done }

// ExitCode is the process's exit code, once it exited.
func (s *GatewayServer) ExitCode() int { return s.proc.cmd.ProcessState.ExitCode() }

// Get asks the HTTP listener for path (the metrics listener for /metrics).
func (s *GatewayServer) Get(path string) (int, string, error) {
	addr := s.HTTPAddr
	if path == "/metrics" {
		addr = s.MetricsAddr
	}
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// Dial returns a client of the server over mutual TLS with the Gateway's
// certificate, or, withCert false, with no client certificate.
func (s *GatewayServer) Dial(withCert bool) (pb.RateLimitServiceClient, func(), error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: s.g.Certs.Pool, ServerName: "localhost"}
	if withCert {
		tc.Certificates = []tls.Certificate{s.g.Certs.Pair}
	}
	cc, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		return nil, nil, err
	}
	return pb.NewRateLimitServiceClient(cc), func() { _ = cc.Close() }, nil
}

// Close stops the server.
func (s *GatewayServer) Close() { s.proc.close() }

// SyncBuffer is an io.Writer safe for a process's two output streams and
// a reader at once.
type SyncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// String returns everything written.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// BuildTollgateRLS builds cmd/tollgate-rls as its Dockerfile builds it
// (its own module and go.sum, CGO_ENABLED=0: a static binary) into dir,
// and returns the binary's path, named ratelimit as the image installs it.
func BuildTollgateRLS(dir string) (string, error) {
	work, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil || len(bytes.TrimSpace(work)) == 0 {
		return "", fmt.Errorf("building tollgate-rls: the repository's go.work is not found (%v)", err)
	}
	bin := filepath.Join(dir, "ratelimit")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Dir = filepath.Join(filepath.Dir(string(bytes.TrimSpace(work))), "cmd", "tollgate-rls")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building tollgate-rls: %v\n%s", err, out)
	}
	return bin, nil
}

// EnvoyRatelimitBin is envoyproxy/ratelimit's server binary, for Start.
func EnvoyRatelimitBin() (string, error) { return envoyRatelimitBin() }
