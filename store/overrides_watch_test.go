package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// announcements counts a watch's calls and remembers when the last came.
type announcements struct {
	n    atomic.Int64
	last atomic.Int64 // unix nanoseconds
}

// heard is the watch's function.
func (a *announcements) heard() {
	a.last.Store(time.Now().UnixNano())
	a.n.Add(1)
}

// await waits until a has counted want calls, failing after d, and returns
// how long after it began waiting the last of them came (0 when it came
// before: an announcement may overtake the reply to the change).
func (a *announcements) await(t *testing.T, want int64, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	redistest.Eventually(t, d, func() error {
		if got := a.n.Load(); got < want {
			return fmt.Errorf("%d announcements, want %d", got, want)
		}
		return nil
	})
	return max(time.Unix(0, a.last.Load()).Sub(start), 0)
}

// A change through one client is announced to a watch on another within
// 100ms, on a single node, a Cluster (the watch on whichever node go-redis
// picks, the change published through any) and Sentinel; a watch whose
// subscription is killed subscribes again and says so; stop ends it.
func TestRedisWatchOverrides(t *testing.T) {
	sentinel := func(t *testing.T) redis.UniversalClient {
		s := redistest.Sentinel(t, redistest.Start(t))
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: []string{s.Addr()}})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	for name, newClients := range map[string]func(t *testing.T) (redis.UniversalClient, redis.UniversalClient){
		"single": func(t *testing.T) (redis.UniversalClient, redis.UniversalClient) {
			s := redistest.Single(t)
			return s.Client(t), s.Client(t)
		},
		"cluster": func(t *testing.T) (redis.UniversalClient, redis.UniversalClient) {
			c := redistest.SharedCluster(t)
			return c.Client(t), c.Client(t)
		},
		"sentinel": func(t *testing.T) (redis.UniversalClient, redis.UniversalClient) {
			c := sentinel(t)
			return c, c
		},
	} {
		t.Run(name, func(t *testing.T) {
			ca, cb := newClients(t)
			prefix := redistest.KeyPrefix(t)
			a, b := newRedis(t, ca, WithPrefix(prefix)), newRedis(t, cb, WithPrefix(prefix))
			var heard announcements
			stop := b.WatchOverrides(heard.heard)
			defer stop()
			heard.await(t, 1, 5*time.Second) // the subscription
			ctx := context.Background()
			var took []time.Duration
			for i := range int64(3) {
				if err := a.SetOverride(ctx, "g", tollgate.Override{Key: "k", Limits: []tollgate.Limit{tollgate.PerHour(1 + i)}}, 0); err != nil {
					t.Fatal(err)
				}
				// The bound is the feature: sooner than the 1s refresh that
				// would find the change without it, with room for a busy
				// machine (a round trip takes well under 1ms when idle).
				d := heard.await(t, 2+i, 2*time.Second)
				if d > 500*time.Millisecond {
					t.Errorf("change %d announced after %s, want well within the 1s refresh", i, d)
				}
				took = append(took, d)
			}
			t.Logf("announced after SetOverride returned: %v", took)
			if err := a.DeleteOverride(ctx, "g", "k"); err != nil {
				t.Fatal(err)
			}
			heard.await(t, 5, time.Second)
		})
	}
	t.Run("resubscribes", func(t *testing.T) {
		srv := redistest.Start(t)
		st := newRedis(t, srv.Client(t))
		var heard announcements
		stop := st.WatchOverrides(heard.heard)
		defer stop()
		heard.await(t, 1, 5*time.Second)
		if err := srv.Client(t).Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		heard.await(t, 2, 5*time.Second) // a change may have been missed
	})
}

// A watch established on a Cluster hears every change even while the
// cluster bus is down: each change is announced on the node the watch
// subscribes on, the primary of the channel's slot, which delivers it
// itself. Before each change every node drops its bus links to the others
// (DEBUG CLUSTERLINK KILL TO); a PUBLISH sent to another node, to be
// handed on over the bus, was lost then (with no link to send it on; on
// Valkey 8.0 also on a link re-made and not yet established both ways, as
// on a Cluster just started or on a busy machine), so that a watch missed
// about two changes in three.
func TestRedisWatchOverridesBusDown(t *testing.T) {
	cl := redistest.NewClusterTimeout(t, 0, 5*time.Second)
	ctx := context.Background()
	ids := map[string]string{} // by address
	for _, n := range cl.Nodes {
		id, err := n.Client(t).ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids[n.Addr()] = id
	}
	cutBus := func() {
		for _, n := range cl.Nodes {
			c := n.Client(t)
			// Every link up first: Redis 7.0 crashes killing a link that
			// is not there.
			redistest.Eventually(t, 5*time.Second, func() error {
				to, err := linksTo(ctx, c)
				if err != nil {
					return err
				}
				for addr, id := range ids {
					if addr != n.Addr() && !to[id] {
						return fmt.Errorf("%s has no bus link to %s yet", n.Addr(), addr)
					}
				}
				return nil
			})
			for addr, id := range ids {
				if addr == n.Addr() {
					continue
				}
				if err := c.Do(ctx, "DEBUG", "CLUSTERLINK", "KILL", "TO", id).Err(); err != nil {
					t.Fatalf("DEBUG CLUSTERLINK KILL on %s: %v", n.Addr(), err)
				}
			}
		}
	}
	prefix := redistest.KeyPrefix(t)
	a, b := newRedis(t, cl.Client(t), WithPrefix(prefix)), newRedis(t, cl.Client(t), WithPrefix(prefix))
	var heard announcements
	stop := b.WatchOverrides(heard.heard)
	defer stop()
	heard.await(t, 1, 5*time.Second) // the subscription
	for i := range int64(6) {
		cutBus()
		if err := a.SetOverride(ctx, "g", tollgate.Override{Key: fmt.Sprint("k", i), Limits: []tollgate.Limit{tollgate.PerHour(1 + i)}}, 0); err != nil {
			t.Fatal(err)
		}
		// Within 2s (a round trip when heard; never when lost), with room
		// for a busy machine.
		heard.await(t, 2+i, 2*time.Second)
	}
}

// linksTo returns the Cluster nodes (by id) c's server has an outgoing
// bus link to (CLUSTER LINKS).
func linksTo(ctx context.Context, c *redis.Client) (map[string]bool, error) {
	links, err := c.Do(ctx, "CLUSTER", "LINKS").Slice()
	if err != nil {
		return nil, err
	}
	to := map[string]bool{}
	for _, l := range links {
		var fields []any
		switch l := l.(type) {
		case []any:
			fields = l
		case map[any]any: // RESP3
			for k, v := range l {
				fields = append(fields, k, v)
			}
		}
		var dir, node string
		for i := 0; i+1 < len(fields); i += 2 {
			switch fields[i] {
			case "direction":
				dir, _ = fields[i+1].(string)
			case "node":
				node, _ = fields[i+1].(string)
			}
		}
		if dir == "to" {
			to[node] = true
		}
	}
	return to, nil
}

// A Memory store's watch is called after each change, in the goroutine
// that made it; stop ends it.
func TestMemoryWatchOverrides(t *testing.T) {
	m := newMemory(t)
	var heard atomic.Int64
	stop := m.WatchOverrides(func() { heard.Add(1) })
	ctx := context.Background()
	if err := m.SetOverride(ctx, "g", tollgate.Override{Key: "k"}, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteOverride(ctx, "g", "k"); err != nil {
		t.Fatal(err)
	}
	if heard.Load() != 2 {
		t.Fatalf("heard %d changes, want 2", heard.Load())
	}
	stop()
	if err := m.SetOverride(ctx, "g", tollgate.Override{Key: "k"}, 0); err != nil {
		t.Fatal(err)
	}
	if heard.Load() != 2 {
		t.Fatalf("heard %d changes after stop, want 2", heard.Load())
	}
}

// The override calls return at their context's deadline on a hung Redis,
// even with a client that does not give up a command at its context's end.
func TestRedisOverridesBoundedByDeadline(t *testing.T) {
	srv := redistest.Start(t)
	o := srv.Options()
	o.ReadTimeout = 2 * time.Second // ContextTimeoutEnabled unset: only this ends a hung read
	c := redis.NewClient(o)
	defer c.Close()
	st := newRedis(t, c)
	ctx := context.Background()
	if err := st.SetOverride(ctx, "g", tollgate.Override{Key: "k", Limits: []tollgate.Limit{tollgate.PerHour(1)}}, 0); err != nil {
		t.Fatal(err)
	}
	ends := srv.Pause(t, 3*time.Second)
	const deadline = 50 * time.Millisecond
	for name, call := range map[string]func(context.Context) error{
		"version":   func(ctx context.Context) error { _, err := st.OverridesVersion(ctx); return err },
		"overrides": func(ctx context.Context) error { _, err := st.Overrides(ctx, "g"); return err },
		"set": func(ctx context.Context) error {
			return st.SetOverride(ctx, "g", tollgate.Override{Key: "k", Limits: []tollgate.Limit{tollgate.PerHour(2)}}, 0)
		},
		"delete": func(ctx context.Context) error { return st.DeleteOverride(ctx, "g", "k") },
	} {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		start := time.Now()
		err := call(ctx)
		cancel()
		// Returned while Redis was still paused: at its deadline, not when
		// Redis answered (no timed bound: a busy machine).
		if elapsed := time.Since(start); time.Now().After(ends) {
			t.Errorf("%s took %s on a hung Redis, past the pause: deadline %s", name, elapsed, deadline)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s on a hung Redis: %v, want the deadline", name, err)
		}
	}
	srv.AwaitAnswer(t, 10*time.Second)
	// The commands abandoned at their deadline end at the client's read
	// timeout at the latest, or as soon as the server answers them.
	if !redistest.AwaitGoroutinesGone(o.ReadTimeout+time.Second, "store.bounded[") {
		t.Errorf("a command abandoned at its deadline still runs %s after the server answers again", o.ReadTimeout+time.Second)
	}
}

// DeleteOverride refuses a key longer than MaxKeyLen on both stores, as
// SetOverride does, and writes nothing.
func TestDeleteOverrideRefusesOversizedKey(t *testing.T) {
	key := strings.Repeat("k", tollgate.MaxKeyLen+1)
	srv := redistest.Single(t)
	prefix := redistest.KeyPrefix(t)
	r := newRedis(t, srv.Client(t), WithPrefix(prefix))
	for name, st := range map[string]tollgate.OverrideStore{"memory": newMemory(t), "redis": r} {
		ctx := context.Background()
		before, err := st.OverridesVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteOverride(ctx, "g", key); !errors.Is(err, tollgate.ErrInvalidRequest) {
			t.Errorf("%s: DeleteOverride of a %d-byte key = %v, want ErrInvalidRequest", name, len(key), err)
		}
		if after, _ := st.OverridesVersion(ctx); after != before {
			t.Errorf("%s: the version moved from %d to %d on a refused delete", name, before, after)
		}
	}
}

// ReleaseSeat and SeatsInUse refuse a key longer than MaxKeyLen on both
// stores alike.
func TestSeatCallsRefuseOversizedKey(t *testing.T) {
	key := strings.Repeat("k", tollgate.MaxKeyLen+1)
	r := newRedis(t, redistest.Single(t).Client(t), WithPrefix(redistest.KeyPrefix(t)))
	for name, st := range map[string]tollgate.SeatStore{"memory": newMemory(t), "redis": r} {
		ctx := context.Background()
		if _, err := st.SeatsInUse(ctx, key); !errors.Is(err, tollgate.ErrInvalidRequest) {
			t.Errorf("%s: SeatsInUse of a %d-byte key = %v, want ErrInvalidRequest", name, len(key), err)
		}
		if err := st.ReleaseSeat(ctx, tollgate.Seat{Key: key, Max: 1, ID: "id", TTL: time.Second}); !errors.Is(err, tollgate.ErrInvalidRequest) {
			t.Errorf("%s: ReleaseSeat of a %d-byte key = %v, want ErrInvalidRequest", name, len(key), err)
		}
	}
}

// TestMemoryOverrideExpiresOnItsClock: the Memory store reports an
// override's end on the clock it decides by (WithClock), so that a
// limiter sharing that clock sees it end when the store does.
func TestMemoryOverrideExpiresOnItsClock(t *testing.T) {
	at := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	m := newMemory(t, WithClock(func() time.Time { return at }))
	ctx := context.Background()
	if err := m.SetOverride(ctx, "rule", tollgate.Override{Key: "a", Limits: []tollgate.Limit{tollgate.PerSecond(1)}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	list, err := m.Overrides(ctx, "rule")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !list[0].Expires.Equal(at.Add(time.Hour)) {
		t.Fatalf("overrides %+v, want one ending at %s", list, at.Add(time.Hour))
	}
}
