package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// InstallHint is the error text when redis-server is needed and missing.
const InstallHint = "redis-server not found on PATH: install it (apt-get install -y redis-server redis-tools) or point the measurement at a running Redis with REDIS_URL"

// Server is a redis-server process started for a measurement.
type Server struct {
	// Addr is the loopback host:port it listens on.
	Addr string
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// StartRedis starts redis-server on a free loopback port, without
// persistence, in a new temporary directory, and returns once it answers
// PING. extraArgs are passed to redis-server. Close stops it. The process
// gets SIGKILL from the kernel if this process dies first, so it never
// outlives the measurement.
func StartRedis(extraArgs ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New(InstallHint)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir, err := os.MkdirTemp("", "tollgate-bench-redis-")
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--protected-mode", "no", "--logfile", "redis.log",
	}, extraArgs...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting redis-server: %w", err)
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()

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
		case <-s.done:
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
func (s *Server) Close() {
	_ = s.cmd.Process.Kill()
	<-s.done
	_ = os.RemoveAll(s.dir)
}

// Options returns client options for the server as the measurements use
// them: go-redis defaults, with context deadlines honoured on the socket (as
// package interceptor recommends).
func (s *Server) Options() *redis.Options {
	return &redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true}
}

// Cluster is a Redis Cluster of primaries only, started for a measurement.
type Cluster struct {
	// Nodes are its primaries, in the order of the slot ranges they serve.
	Nodes []*Server
}

// StartCluster starts n redis-servers in cluster mode (StartRedis), gives
// node i the i-th of n equal ranges of the slot space, as redis-cli
// --cluster create does, joins them, and returns once every node reports
// the cluster ok. Close stops every node.
func StartCluster(n int) (*Cluster, error) {
	cl := &Cluster{}
	for range n {
		s, err := StartRedis("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		if err != nil {
			cl.Close()
			return nil, err
		}
		cl.Nodes = append(cl.Nodes, s)
	}
	ctx := context.Background()
	for i, s := range cl.Nodes {
		c := redis.NewClient(s.Options())
		lo, hi := i*16384/n, (i+1)*16384/n-1
		err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err()
		for _, o := range cl.Nodes[:i] {
			if err == nil {
				host, port, _ := net.SplitHostPort(o.Addr)
				err = c.ClusterMeet(ctx, host, port).Err()
			}
		}
		_ = c.Close()
		if err != nil {
			cl.Close()
			return nil, fmt.Errorf("forming the cluster on %s: %w", s.Addr, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range cl.Nodes {
		c := redis.NewClient(s.Options())
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				break
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				cl.Close()
				return nil, fmt.Errorf("cluster not ok on %s within 30s: %v %s", s.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Close()
	}
	return cl, nil
}

// Options returns ClusterClient options for the cluster as the measurements
// use them: go-redis defaults, context deadlines honoured on the socket.
func (cl *Cluster) Options() *redis.ClusterOptions {
	var addrs []string
	for _, s := range cl.Nodes {
		addrs = append(addrs, s.Addr)
	}
	return &redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true}
}

// Close stops every node.
func (cl *Cluster) Close() {
	for _, s := range cl.Nodes {
		s.Close()
	}
}
