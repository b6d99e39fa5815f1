// Package redistest gives tests real Redis servers: it starts redis-server
// processes on free loopback ports, or uses the servers named by the
// environment, so that tests exercise the real scripts, the real protocol
// and the real Cluster routing instead of a mock. Tests that wait on such
// real things wait for what they expect through Eventually and Await;
// Elapse is the one way they let a fixed span of real time pass.
//
// Environment:
//
//	REDIS_URL            a single node to use instead of starting one (redis://host:port/db)
//	REDIS_CLUSTER_ADDRS  comma-separated seeds of a Cluster to use instead of starting one
//	REDIS_SERVER         the server binary to start (default redis-server; valkey-server for Valkey)
//	REDIS_CLI            the command-line client that joins a Cluster (default redis-cli; valkey-cli)
//
// REDIS_SERVER and REDIS_CLI are the names the contract suites read, so
// one setting runs both on Valkey.
//
// Single and Cluster return servers shared by every test of the binary:
// started once, on first use, and stopped by Main after the last test. Tests
// sharing them must use their own keys (KeyPrefix). Start, Replica, Sentinel
// and NewCluster start private servers that the test may stop, restart or
// reconfigure; they are stopped when the test ends.
//
// A package using it calls Main from TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// Started processes also get SIGKILL from the kernel if the test binary dies
// (a panic, a -timeout), so no redis-server outlives its test run.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// InstallHint is the message a test fails with when it needs a redis-server
// binary and none is on PATH.
const InstallHint = "install redis-server (apt-get install -y redis-server redis-tools), or set REDIS_URL, or name another server with REDIS_SERVER and REDIS_CLI (valkey-server, valkey-cli)"

// The variables naming the binaries the package starts.
const (
	EnvServer = "REDIS_SERVER"
	EnvCLI    = "REDIS_CLI"
)

// ServerBinary is the server binary the package starts: REDIS_SERVER, or
// redis-server.
func ServerBinary() string { return binary(EnvServer, "redis-server") }

// CLIBinary is the command-line client the package runs (to join a
// Cluster): REDIS_CLI, or redis-cli. A test that runs a client command of
// its own runs this one.
func CLIBinary() string { return binary(EnvCLI, "redis-cli") }

func binary(env, def string) string {
	if v := strings.TrimSpace(os.Getenv(env)); v != "" {
		return v
	}
	return def
}

// startTimeout bounds how long a process or a Cluster may take to become
// ready. Locally they take milliseconds (a Cluster about a second); the bound
// only turns a hang into a clear failure.
const startTimeout = 20 * time.Second

// Main runs the package's tests, stops every shared server this package
// started, checks that no goroutine leaked (go.uber.org/goleak, with opts)
// when the tests passed, and exits with the tests' status. Call it from
// TestMain.
func Main(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	stopShared()
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Server is one Redis node: a redis-server process started by this package,
// or an external node named by REDIS_URL.
type Server struct {
	addr string
	base *redis.Options // external server: the parsed REDIS_URL

	mu   sync.Mutex
	proc *process // nil for an external server or when stopped
	lead []string // configuration file and mode (Sentinel), kept for Restart
	args []string // extra redis-server arguments, kept for Restart
	dir  string
	port int
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// External reports whether the server was given by REDIS_URL rather than
// started by this package; external servers cannot be stopped or restarted.
func (s *Server) External() bool { return s.base != nil }

// Options returns new client options for the server, ready to adjust (for
// example a short ReadTimeout) before redis.NewClient.
func (s *Server) Options() *redis.Options {
	if s.base != nil {
		o := *s.base
		return &o
	}
	return &redis.Options{Addr: s.addr}
}

// Client returns a new client for the server, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(s.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop kills the server process (SIGKILL: like a crash, nothing is saved)
// and waits for it to exit. It fails the test for an external server.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	defer s.lockOwned(t, "stop")()
	s.stopLocked()
}

// Restart starts the server again on the same port with the same data
// directory (a Cluster node keeps its identity from nodes.conf) and waits
// until it answers PING. The data set starts empty: persistence is off.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	defer s.lockOwned(t, "restart")()
	s.stopLocked()
	p, err := spawn(s.dir, s.port, s.lead, s.args)
	if err != nil {
		t.Fatalf("redistest: restart %s: %v", s.addr, err)
	}
	s.proc = p
}

// lockOwned locks s for what (stop, restart) and returns its unlock; it
// fails the test for an external server, which this package did not start.
func (s *Server) lockOwned(t testing.TB, what string) (unlock func()) {
	t.Helper()
	if s.base != nil {
		t.Fatalf("redistest: cannot %s %s: it was given by REDIS_URL, not started by the test", what, s.addr)
	}
	s.mu.Lock()
	return s.mu.Unlock
}

func (s *Server) stopLocked() {
	if s.proc != nil {
		s.proc.kill()
		s.proc = nil
	}
}

// destroy stops the server and removes its data directory.
func (s *Server) destroy() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// Single returns the shared single-node server: REDIS_URL when set,
// otherwise a redis-server started on first use.
func Single(t testing.TB) *Server {
	t.Helper()
	shared.single.once.Do(func() {
		if u := os.Getenv("REDIS_URL"); u != "" {
			o, err := redis.ParseURL(u)
			if err != nil {
				shared.single.err = fmt.Errorf("REDIS_URL: %w", err)
				return
			}
			shared.single.srv = &Server{addr: o.Addr, base: o}
			return
		}
		shared.single.srv, shared.single.err = startServer(nil, "")
		if shared.single.err == nil {
			shared.track(shared.single.srv)
		}
	})
	if shared.single.err != nil {
		t.Fatalf("redistest: single node: %v", shared.single.err)
	}
	return shared.single.srv
}

// Start starts a private single-node redis-server for this test, stopped and
// removed when the test ends. Use it for tests that stop, restart or
// reconfigure their server. It needs the redis-server binary even when
// REDIS_URL is set. extraArgs are passed to redis-server ("--maxmemory",
// "1mb").
func Start(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	s, err := startServer(extraArgs, "")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.destroy)
	return s
}

// SentinelMaster is the name under which Sentinel monitors the primary.
const SentinelMaster = "tollgate"

// Sentinel starts a private Redis Sentinel monitoring primary as
// SentinelMaster (quorum 1, down after 1s), for redis.NewFailoverClient. It
// is stopped when the test ends.
func Sentinel(t testing.TB, primary *Server) *Server {
	t.Helper()
	skipShort(t, "a Sentinel")
	host, port, err := net.SplitHostPort(primary.Addr())
	if err != nil {
		t.Fatalf("redistest: sentinel for %q: %v", primary.Addr(), err)
	}
	conf := "sentinel monitor " + SentinelMaster + " " + host + " " + port + " 1\n" +
		"sentinel down-after-milliseconds " + SentinelMaster + " 1000\n" +
		"sentinel failover-timeout " + SentinelMaster + " 5000\n"
	s, err := startServer(nil, conf)
	if err != nil {
		t.Fatalf("redistest: sentinel: %v", err)
	}
	t.Cleanup(s.destroy)
	return s
}

// Replica starts a private redis-server replicating primary (REPLICAOF) and
// returns once the initial synchronisation is done and the link is up. It is
// stopped when the test ends.
func Replica(t testing.TB, primary *Server) *Server {
	t.Helper()
	skipShort(t, "a replica (failover)")
	host, port, err := net.SplitHostPort(primary.Addr())
	if err != nil {
		t.Fatalf("redistest: replica of %q: %v", primary.Addr(), err)
	}
	args := []string{"--replicaof", host, port}
	if o := primary.Options(); o.Password != "" {
		args = append(args, "--masterauth", o.Password)
		if o.Username != "" {
			args = append(args, "--masteruser", o.Username)
		}
	}
	r := Start(t, args...)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := waitInfo(ctx, r.Addr(), "replication", "master_link_status:up"); err != nil {
		t.Fatalf("redistest: replica %s of %s: %v", r.Addr(), primary.Addr(), err)
	}
	return r
}

// Cluster is a Redis Cluster: seed addresses and, when this package started
// it, its nodes.
type Cluster struct {
	// Addrs are the seed addresses: every node started, or
	// REDIS_CLUSTER_ADDRS.
	Addrs []string
	// Nodes are the started nodes, primaries first, then replicas in the
	// order redis-cli assigned them; empty for an external Cluster.
	Nodes []*Server
}

// Options returns new client options for the Cluster, ready to adjust before
// redis.NewClusterClient.
func (c *Cluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: append([]string(nil), c.Addrs...)}
}

// Client returns a new Cluster client, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(c.Options())
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// SharedCluster returns the shared 3-primary Cluster without replicas:
// REDIS_CLUSTER_ADDRS when set, otherwise one started on first use.
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	skipShort(t, "a Cluster")
	shared.cluster.once.Do(func() {
		if v := os.Getenv("REDIS_CLUSTER_ADDRS"); v != "" {
			var addrs []string
			for _, a := range strings.Split(v, ",") {
				if a = strings.TrimSpace(a); a != "" {
					addrs = append(addrs, a)
				}
			}
			shared.cluster.c = &Cluster{Addrs: addrs}
			return
		}
		shared.cluster.c, shared.cluster.err = startCluster(0, sharedNodeTimeout)
		if shared.cluster.err == nil {
			for _, n := range shared.cluster.c.Nodes {
				shared.track(n)
			}
		}
	})
	if shared.cluster.err != nil {
		t.Fatalf("redistest: cluster: %v", shared.cluster.err)
	}
	return shared.cluster.c
}

// NewCluster starts a private Cluster of 3 primaries with replicas replicas
// each, for tests that kill nodes or fail over; it returns once every node
// reports cluster_state:ok and every replica's link is up, and it is stopped
// when the test ends. Its cluster-node-timeout is short (FailoverNodeTimeout)
// so that a killed primary is replaced within seconds.
func NewCluster(t testing.TB, replicas int) *Cluster {
	t.Helper()
	skipShort(t, "a Cluster")
	return NewClusterTimeout(t, replicas, FailoverNodeTimeout)
}

// FailoverNodeTimeout is the cluster-node-timeout of NewCluster's nodes: a
// primary unreachable this long is marked failed and its replica promoted.
const FailoverNodeTimeout = 2 * time.Second

// sharedNodeTimeout is the shared Cluster's cluster-node-timeout, generous so
// that a machine busy with race-enabled tests never marks a node failed.
const sharedNodeTimeout = 5 * time.Second

// KeyPrefix returns a key prefix unique to this test and this run, without
// braces, for tests that share a server: "t:<test name>:<random>:".
func KeyPrefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.Map(func(r rune) rune {
		if r == '{' || r == '}' || r <= ' ' || r > '~' {
			return '_'
		}
		return r
	}, t.Name())
	return "t:" + name + ":" + hex.EncodeToString(b[:]) + ":"
}

// registry holds the servers shared by the tests of one binary.
type registry struct {
	single struct {
		once sync.Once
		srv  *Server
		err  error
	}
	cluster struct {
		once sync.Once
		c    *Cluster
		err  error
	}
	mu      sync.Mutex
	started []*Server
}

var shared registry

// track remembers a started shared server so that Main stops it.
func (r *registry) track(s *Server) {
	r.mu.Lock()
	r.started = append(r.started, s)
	r.mu.Unlock()
}

// stopShared stops every shared server and removes its data.
func stopShared() {
	shared.mu.Lock()
	started := shared.started
	shared.started = nil
	shared.mu.Unlock()
	for _, s := range started {
		s.destroy()
	}
}

// skipShort skips t under go test -short, which runs the fast core on
// single nodes: what names the part that needs more (a Cluster, a Sentinel,
// a replica to fail over to), which the full command runs.
func skipShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: needs %s; the full test command runs it", what)
	}
}

// SkipFaultShort skips t under go test -short: a fault test that waits out
// deadlines on a server it freezes (CLIENT PAUSE, DEBUG SLEEP), seconds of
// real time each. Call it before the test starts anything. The full test
// command runs it.
func SkipFaultShort(t testing.TB) {
	t.Helper()
	skipShort(t, "seconds of a frozen server's deadlines waited out")
}
