package redistest

// Faults: the helpers reliability tests use to hurt a server on purpose
// (stop it, pause it, put it to sleep, fail a Cluster or Sentinel primary
// over) and to read what the server saw (INFO fields, error counts).

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pause makes s stop answering every client for d (CLIENT PAUSE d ALL, sent
// on a connection of its own) and returns the instant the pause ends. It is
// a blackhole from a client's point of view: connections are accepted and
// commands are read, but nothing is answered until the pause ends. Commands
// of clients that gave up and closed their connection meanwhile are dropped.
//
// The pause cannot be lifted early: Redis 7.0 pauses CLIENT UNPAUSE itself
// under CLIENT PAUSE ALL. Wait it out (AwaitAnswer), or Restart the server.
func (s *Server) Pause(t testing.TB, d time.Duration) time.Time {
	t.Helper()
	ms := max(d.Milliseconds(), 1)
	if _, err := command(s.addr, "CLIENT", "PAUSE", strconv.FormatInt(ms, 10), "ALL"); err != nil {
		t.Fatalf("redistest: CLIENT PAUSE on %s: %v", s.addr, err)
	}
	// The server timed the pause from the moment it ran the command, a
	// little before the reply arrived here.
	return time.Now().Add(time.Duration(ms) * time.Millisecond)
}

// Sleep blocks s's main thread for d (DEBUG SLEEP, sent on a connection of
// its own) and returns once s has stopped answering, with a channel that
// yields DEBUG SLEEP's result when the sleep ends. Unlike Pause, commands sent
// meanwhile sit in the socket buffers and all run when the server wakes, even
// those whose client has given up: this is how a reply is delayed past a
// client's read timeout while the command still takes effect.
func (s *Server) Sleep(t testing.TB, d time.Duration) <-chan error {
	t.Helper()
	return SleepAll(t, []*Server{s}, d)[0]
}

// SleepAll is Sleep on every server at once: DEBUG SLEEP goes to each
// before any is awaited, so that their sleeps overlap from the start
// (one after another, the first could wake before the last fell asleep on
// a busy machine). It returns once every one has stopped answering, with
// a channel per server as Sleep's.
func SleepAll(t testing.TB, servers []*Server, d time.Duration) []<-chan error {
	t.Helper()
	secs := strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
	var conns []net.Conn
	for _, s := range servers {
		if err := ping(s.addr, time.Second); err != nil {
			t.Fatalf("redistest: %s does not answer before DEBUG SLEEP: %v", s.addr, err)
		}
		conn, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err != nil {
			t.Fatalf("redistest: DEBUG SLEEP on %s: %v", s.addr, err)
		}
		_ = conn.SetDeadline(time.Now().Add(d + 10*time.Second))
		conns = append(conns, conn)
	}
	dones := make([]<-chan error, len(servers))
	for i, s := range servers {
		conn := conns[i]
		if err := send(conn, "DEBUG", "SLEEP", secs); err != nil {
			for _, c := range conns[i:] {
				c.Close()
			}
			t.Fatalf("redistest: DEBUG SLEEP on %s: %v", s.addr, err)
		}
		done := make(chan error, 1)
		go func() {
			defer conn.Close()
			done <- readReply(conn)
		}()
		dones[i] = done
	}
	for _, s := range servers {
		// Asleep once two PINGs in a row, each sent after DEBUG SLEEP, go
		// unanswered: a busy machine can delay one answer, hardly two.
		silent := 0
		asleep := func() bool {
			if ping(s.addr, 30*time.Millisecond) == nil {
				silent = 0
				return false
			}
			silent++
			return silent == 2
		}
		if !Await(5*time.Second, asleep) {
			t.Fatalf("redistest: %s still answers after DEBUG SLEEP %s", s.addr, secs)
		}
	}
	return dones
}

// AwaitAnswer waits until s answers PING on a new connection, polling at
// least every 5ms, and returns the instant it first did (tests measure
// recoveries from it). It fails the test if s does not answer within
// timeout.
func (s *Server) AwaitAnswer(t testing.TB, timeout time.Duration) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	at, err := pollEvery(ctx, 5*time.Millisecond, func() error { return ping(s.addr, 100*time.Millisecond) })
	if err != nil {
		t.Fatalf("redistest: %s does not answer after %s: %v", s.addr, timeout, err)
	}
	return at
}

// Info returns field from INFO section on s ("" when absent). It fails the
// test if s does not answer.
func (s *Server) Info(t testing.TB, section, field string) string {
	t.Helper()
	info, err := command(s.addr, "INFO", section)
	if err != nil {
		t.Fatalf("redistest: INFO %s on %s: %v", section, s.addr, err)
	}
	return infoField(info, field)
}

// ErrorCount returns how many times s has answered the error code (for
// example "NOSCRIPT" or "READONLY") since it started: errorstat_<code> in
// INFO errorstats, 0 when it never did.
func (s *Server) ErrorCount(t testing.TB, code string) int64 {
	t.Helper()
	v := s.Info(t, "errorstats", "errorstat_"+code)
	n, _ := strconv.ParseInt(strings.TrimPrefix(v, "count="), 10, 64)
	return n
}

// ping sends PING on a new connection with timeout for the whole exchange.
func ping(address string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", address, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	return roundTrip(conn, "PING")
}

// roundTrip sends one command on conn and reads the first line of its reply,
// returning the error a "-" reply carries.
func roundTrip(conn net.Conn, args ...string) error {
	if err := send(conn, args...); err != nil {
		return err
	}
	return readReply(conn)
}

// send writes one command on conn.
func send(conn net.Conn, args ...string) error {
	var req strings.Builder
	req.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		req.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	_, err := conn.Write([]byte(req.String()))
	return err
}

// readReply reads the first line of a reply on conn, returning the error a
// "-" reply carries.
func readReply(conn net.Conn) error {
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if err != nil {
		return err
	}
	if line := string(buf[:n]); strings.HasPrefix(line, "-") {
		return fmt.Errorf("%s", strings.TrimSpace(line[1:]))
	}
	return nil
}

// NewClusterTimeout is NewCluster with cluster-node-timeout nodeTimeout: a
// primary unreachable that long is marked failed and, with replicas, its
// replica is promoted about a second later. Failover tests use 1s to stay
// fast; the machine must not be so busy that a healthy node misses its
// pings for that long.
func NewClusterTimeout(t testing.TB, replicas int, nodeTimeout time.Duration) *Cluster {
	t.Helper()
	skipShort(t, "a Cluster")
	c, err := startCluster(replicas, nodeTimeout)
	if err != nil {
		t.Fatalf("redistest: cluster: %v", err)
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			n.destroy()
		}
	})
	return c
}

// Node returns the started node listening on addr, or nil.
func (c *Cluster) Node(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// ReplicaOf returns the started node that replicates primary, by its INFO
// replication. It fails the test if there is none.
func (c *Cluster) ReplicaOf(t testing.TB, primary *Server) *Server {
	t.Helper()
	_, port, _ := net.SplitHostPort(primary.Addr())
	for _, n := range c.Nodes {
		if n == primary {
			continue
		}
		info, err := command(n.Addr(), "INFO", "replication")
		if err != nil {
			continue // a node stopped by the test
		}
		if infoField(info, "role") == "slave" && infoField(info, "master_port") == port {
			return n
		}
	}
	t.Fatalf("redistest: no node replicates %s", primary.Addr())
	return nil
}

// AwaitPromoted waits until s reports itself a primary and its view of the
// Cluster is whole again (cluster_state:ok), and returns that instant. It
// fails the test after timeout.
func (c *Cluster) AwaitPromoted(t testing.TB, s *Server, timeout time.Duration) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := waitFor(ctx, func() error {
		info, err := command(s.Addr(), "INFO", "replication")
		if err != nil {
			return err
		}
		if role := infoField(info, "role"); role != "master" {
			return fmt.Errorf("%s is still %s", s.Addr(), role)
		}
		cinfo, err := command(s.Addr(), "CLUSTER", "INFO")
		if err != nil {
			return err
		}
		if st := infoField(cinfo, "cluster_state"); st != "ok" {
			return fmt.Errorf("%s sees cluster_state %s", s.Addr(), st)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: no promotion within %s: %v", timeout, err)
	}
	return time.Now()
}

// sentinelClient returns a client for the Sentinel sentinel; the caller
// closes it.
func sentinelClient(sentinel *Server) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr(), MaxRetries: -1})
}

// AwaitSentinelReplicas waits until sentinel knows n replicas of
// SentinelMaster that it does not consider down, which SENTINEL FAILOVER
// needs. A Sentinel learns of replicas from the primary's INFO, which it
// reads every few seconds at first, so this can take a moment.
func AwaitSentinelReplicas(t testing.TB, sentinel *Server, n int, timeout time.Duration) {
	t.Helper()
	sc := sentinelClient(sentinel)
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := waitFor(ctx, func() error {
		replicas, err := sc.Replicas(ctx, SentinelMaster).Result()
		if err != nil {
			return err
		}
		up := 0
		for _, r := range replicas {
			if !strings.Contains(r["flags"], "down") && !strings.Contains(r["flags"], "disconnected") &&
				r["master-link-status"] == "ok" {
				up++
			}
		}
		if up < n {
			return fmt.Errorf("sentinel knows %d healthy replicas, want %d: %v", up, n, replicas)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// SentinelPrimary returns the address sentinel names as SentinelMaster's
// primary.
func SentinelPrimary(t testing.TB, sentinel *Server) string {
	t.Helper()
	sc := sentinelClient(sentinel)
	defer sc.Close()
	addr, err := sc.GetMasterAddrByName(context.Background(), SentinelMaster).Result()
	if err != nil || len(addr) != 2 {
		t.Fatalf("redistest: SENTINEL GET-MASTER-ADDR-BY-NAME: %q, %v", addr, err)
	}
	return net.JoinHostPort(addr[0], addr[1])
}

// SentinelFailover makes sentinel fail SentinelMaster over to a replica now
// (SENTINEL FAILOVER, no agreement from other Sentinels needed) and returns
// at once; AwaitSentinelPrimary waits for the switch.
func SentinelFailover(t testing.TB, sentinel *Server) {
	t.Helper()
	sc := sentinelClient(sentinel)
	defer sc.Close()
	if err := sc.Failover(context.Background(), SentinelMaster).Err(); err != nil {
		t.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
}

// AwaitSentinelPrimary waits until sentinel names a primary other than old
// and that primary reports role:master, and returns the new address and the
// instant it was seen.
func AwaitSentinelPrimary(t testing.TB, sentinel *Server, old string, timeout time.Duration) (string, time.Time) {
	t.Helper()
	sc := sentinelClient(sentinel)
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var addr string
	err := waitFor(ctx, func() error {
		a, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
		if err != nil || len(a) != 2 {
			return fmt.Errorf("GET-MASTER-ADDR-BY-NAME: %q, %v", a, err)
		}
		addr = net.JoinHostPort(a[0], a[1])
		if addr == old {
			return fmt.Errorf("sentinel still names %s", old)
		}
		info, err := command(addr, "INFO", "replication")
		if err != nil {
			return err
		}
		if role := infoField(info, "role"); role != "master" {
			return fmt.Errorf("%s is named primary but is %s", addr, role)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: no Sentinel failover within %s: %v", timeout, err)
	}
	return addr, time.Now()
}

// LetDialProbesEnd registers a cleanup that waits, for at most 3s, until no
// go-redis dial probe is left. A go-redis pool whose dials failed PoolSize
// times in a row (its server was killed) starts a goroutine that dials again
// every second until it succeeds or its pool is closed, so a probe may
// outlive its closed client by up to a second, longer than goleak waits.
// Call it before creating the test's clients: cleanups run last-in
// first-out, so it then runs after they are closed.
func LetDialProbesEnd(t testing.TB) {
	t.Cleanup(func() { AwaitGoroutinesGone(3*time.Second, "pool.(*ConnPool).tryDial") })
}
