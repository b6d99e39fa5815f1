package redistest

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { Main(m) }

func TestSingleIsSharedAndServes(t *testing.T) {
	s := Single(t)
	if again := Single(t); again != s {
		t.Fatalf("Single returned a second server %s, want the shared %s", again.Addr(), s.Addr())
	}
	ctx := context.Background()
	c := s.Client(t)
	key := KeyPrefix(t) + "k"
	if err := c.Set(ctx, key, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got := c.Get(ctx, key).Val(); got != "v" {
		t.Fatalf("GET %s = %q, want %q", key, got, "v")
	}
}

func TestKeyPrefixHasNoBracesAndIsUnique(t *testing.T) {
	a, b := KeyPrefix(t), KeyPrefix(t)
	if a == b {
		t.Fatalf("two prefixes are equal: %q", a)
	}
	if strings.ContainsAny(a, "{}") {
		t.Fatalf("prefix %q contains a brace", a)
	}
}

func TestStartStopRestart(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop(t)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded on a stopped server")
	}
	s.Restart(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after restart: %v", err)
	}
	if n := c.Exists(ctx, "k").Val(); n != 0 {
		t.Fatalf("key survived a restart without persistence: EXISTS = %d", n)
	}
}

func TestReplicaFollowsPrimary(t *testing.T) {
	p := Start(t)
	r := Replica(t, p)
	ctx := context.Background()
	// WAIT waits for the writes of its own connection: one connection.
	pc, rc := p.Client(t).Conn(), r.Client(t)
	defer pc.Close()
	if err := pc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := pc.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want 1 replica", n, err)
	}
	if got := rc.Get(ctx, "k").Val(); got != "v" {
		t.Fatalf("replica GET k = %q, want %q", got, "v")
	}
}

func TestSharedClusterServesEverySlot(t *testing.T) {
	cl := SharedCluster(t)
	if len(cl.Addrs) == 0 {
		t.Fatal("cluster has no seed addresses")
	}
	c := cl.Client(t)
	ctx := context.Background()
	prefix := KeyPrefix(t)
	// Keys spread over the slots of every primary.
	for i := range 64 {
		key := prefix + string(rune('a'+i%26)) + strings.Repeat("x", i)
		if err := c.Set(ctx, key, i, time.Minute).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
	}
	var masters atomic.Int32
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		masters.Add(1)
		return m.Ping(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	if cl.Nodes != nil && masters.Load() != 3 {
		t.Fatalf("shared cluster has %d primaries, want 3", masters.Load())
	}
}

func TestNewClusterWithReplicas(t *testing.T) {
	cl := NewCluster(t, 1)
	if len(cl.Nodes) != 6 {
		t.Fatalf("cluster has %d nodes, want 3 primaries and 3 replicas", len(cl.Nodes))
	}
	ctx := context.Background()
	for i, n := range cl.Nodes {
		info := n.Client(t).Info(ctx, "replication").Val()
		role := "role:master"
		if i >= 3 {
			role = "role:slave"
		}
		if !strings.Contains(info, role) {
			t.Fatalf("node %d (%s) is not %s:\n%s", i, n.Addr(), role, info)
		}
	}
	c := cl.Client(t)
	if err := c.Set(ctx, KeyPrefix(t)+"k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestSentinelNamesThePrimary(t *testing.T) {
	p := Start(t)
	s := Sentinel(t, p)
	ctx := context.Background()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
	defer sc.Close()
	addr, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil || len(addr) != 2 || addr[0]+":"+addr[1] != p.Addr() {
		t.Fatalf("SENTINEL GET-MASTER-ADDR-BY-NAME = %q, %v; want %s", addr, err, p.Addr())
	}
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: []string{s.Addr()}})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got := p.Client(t).Get(ctx, "k").Val(); got != "v" {
		t.Fatalf("write through the failover client not on the primary: GET k = %q", got)
	}
}

// REDIS_SERVER picks the binary Start runs: Valkey's server says so in
// INFO (server_name:valkey), Redis's does not.
func TestServerBinaryFromEnvironment(t *testing.T) {
	for _, tc := range []struct{ server, cli, name string }{
		{"redis-server", "redis-cli", ""},
		{"valkey-server", "valkey-cli", "valkey"},
	} {
		t.Run(tc.server, func(t *testing.T) {
			t.Setenv(EnvServer, tc.server)
			t.Setenv(EnvCLI, tc.cli)
			if ServerBinary() != tc.server || CLIBinary() != tc.cli {
				t.Fatalf("binaries %s, %s; want %s, %s", ServerBinary(), CLIBinary(), tc.server, tc.cli)
			}
			s := Start(t)
			if got := s.Info(t, "server", "server_name"); got != tc.name {
				t.Errorf("%s: INFO server_name = %q, want %q", tc.server, got, tc.name)
			}
		})
	}
	t.Setenv(EnvServer, "")
	if ServerBinary() != "redis-server" {
		t.Errorf("empty REDIS_SERVER: %s, want redis-server", ServerBinary())
	}
}
