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

	"github.com/redis/go-redis/v9"
)

// InstallHint is the error text when redis-server is needed and missing.
const InstallHint = "redis-server not found on PATH: install it (apt-get install -y redis-server redis-tools) or point the measurement at a running Redis with REDIS_URL"

// Server is a redis-server process started for a measurement.
type Server struct {
	// Addr is the loopback host:port it listens on.
	Addr string
	proc *process
}

// StartRedis starts redis-server (or the binary REDIS_SERVER names, as
// the tests' servers: valkey-server for Valkey) on a free loopback port,
// without persistence, in a new temporary directory, and returns once it
// answers PING. extraArgs are passed to the server. Close stops it. The
// process gets SIGKILL from the kernel if this process dies first, so it
// never outlives the measurement.
func StartRedis(extraArgs ...string) (*Server, error) {
	name := os.Getenv("REDIS_SERVER")
	if name == "" {
		name = "redis-server"
	}
	bin, err := exec.LookPath(name)
	if err != nil && name == "redis-server" {
		return nil, errors.New(InstallHint)
	}
	if err != nil {
		return nil, fmt.Errorf("REDIS_SERVER=%s: %w", name, err)
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	dir, err := os.MkdirTemp("", "tollgate-bench-redis-")
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--protected-mode", "no", "--logfile", "redis.log",
	}, extraArgs...)
	proc, err := startProcess(exec.Command(bin, args...), dir, "redis-server")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), proc: proc}

	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-proc.done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server exited at start: %s", log)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("redis-server on %s did not answer PING within 10s: %v", s.Addr, err)
		}
	}
}

// Close kills the server, waits for it to exit and removes its directory.
func (s *Server) Close() { s.proc.close() }

// Signal sends sig to the server's process: SIGSTOP freezes it, SIGCONT
// lets it run again.
func (s *Server) Signal(sig os.Signal) error { return s.proc.cmd.Process.Signal(sig) }

// Options returns client options for the server as the measurements use
// them: go-redis defaults, with context deadlines honoured on the socket (as
// package interceptor recommends).
func (s *Server) Options() *redis.Options {
	return &redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true}
}
