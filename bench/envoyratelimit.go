package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// EnvoyRatelimitInstallHint is the error text when envoyproxy/ratelimit's
// server is needed and missing.
const EnvoyRatelimitInstallHint = "envoyproxy/ratelimit's server not found: go install github.com/envoyproxy/ratelimit/src/service_cmd@latest (or set ENVOY_RATELIMIT_BIN)"

// EnvoyRatelimit is the real envoyproxy/ratelimit server, a process started
// for a test or a measurement.
type EnvoyRatelimit struct {
	// Addr is its gRPC address.
	Addr string
	proc *process
}

// envoyRatelimitBin finds the server: ENVOY_RATELIMIT_BIN, else service_cmd
// on PATH or in the Go bin directory.
func envoyRatelimitBin() (string, error) {
	if b := os.Getenv("ENVOY_RATELIMIT_BIN"); b != "" {
		return b, nil
	}
	if b, err := exec.LookPath("service_cmd"); err == nil {
		return b, nil
	}
	gobin := os.Getenv("GOBIN")
	if gobin == "" {
		out, err := exec.Command("go", "env", "GOPATH").Output()
		if err == nil {
			gobin = filepath.Join(string(out[:len(out)-1]), "bin")
		}
	}
	if b := filepath.Join(gobin, "service_cmd"); gobin != "" {
		if _, err := os.Stat(b); err == nil {
			return b, nil
		}
	}
	return "", errors.New(EnvoyRatelimitInstallHint)
}

// StartEnvoyRatelimit starts envoyproxy/ratelimit on loopback with the
// configuration files (name → YAML) on the Redis at redisAddr, configured
// by environment as its README says, and returns once its health service
// answers SERVING. Close stops it.
func StartEnvoyRatelimit(redisAddr string, files map[string]string) (*EnvoyRatelimit, error) {
	bin, err := envoyRatelimitBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tollgate-envoy-ratelimit-")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o700); err != nil {
		return nil, err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(conf, name), []byte(data), 0o600); err != nil {
			return nil, err
		}
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr, "BACKEND_TYPE=redis",
		"RUNTIME_ROOT="+dir, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=error",
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[0]),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]),
	)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	proc, err := startProcess(cmd, dir, "envoyproxy/ratelimit")
	if err != nil {
		return nil, err
	}
	e := &EnvoyRatelimit{Addr: "127.0.0.1:" + strconv.Itoa(ports[1]), proc: proc}
	cc, err := grpc.NewClient(e.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.Close()
		return nil, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return e, nil
		}
		select {
		case <-proc.done:
			return nil, errors.New("envoyproxy/ratelimit exited at start-up")
		case <-ctx.Done():
			e.Close()
			return nil, fmt.Errorf("envoyproxy/ratelimit does not answer SERVING: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close stops the server and removes its files.
func (e *EnvoyRatelimit) Close() { e.proc.close() }
