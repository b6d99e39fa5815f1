package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/redistest"
)

// shareBackend is a ShareStore under test and how to move its clock: the
// Memory store's is advanced, Redis's is waited for.
type shareBackend struct {
	name    string
	store   tollgate.ShareStore
	advance func(d time.Duration)
	// keys counts the share keys the store holds for prefix.
	keys func(t *testing.T) int
}

func shareBackends(t *testing.T) []shareBackend {
	clock := fakeclock.New(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC))
	mem := newMemory(t, WithClock(clock.Now))
	prefix := redistest.KeyPrefix(t)
	single := redistest.Single(t).Client(t)
	cluster := redistest.SharedCluster(t).Client(t)
	return []shareBackend{
		{name: "memory", store: mem, advance: clock.Advance, keys: func(*testing.T) int {
			mem.shares.mu.Lock()
			defer mem.shares.mu.Unlock()
			return len(mem.shares.keys)
		}},
		{name: "redis", store: newRedis(t, single, WithPrefix(prefix)), advance: redistest.Elapse, keys: func(t *testing.T) int {
			ks, err := single.Keys(context.Background(), prefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			return len(ks)
		}},
		{name: "cluster", store: newRedis(t, cluster, WithPrefix(prefix)), advance: redistest.Elapse, keys: func(t *testing.T) int {
			var mu sync.Mutex
			n := 0
			err := cluster.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
				ks, err := c.Keys(ctx, prefix+"*").Result()
				mu.Lock()
				n += len(ks)
				mu.Unlock()
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return n
		}},
	}
}

func reportShare(t *testing.T, st tollgate.ShareStore, key, member string, limit, demand int64, ttl time.Duration) tollgate.ShareGrant {
	t.Helper()
	g, err := st.Share(context.Background(), tollgate.Share{Key: key, Member: member, Limit: limit, Demand: demand, TTL: ttl})
	if err != nil {
		t.Fatalf("share %s/%s: %v", key, member, err)
	}
	return g
}

// TestShareMaxMinFair reports the demands 10, 50, 200 and 1000 on a limit
// of 400, twice each: the grants are the max-min fair shares 10, 50, 170
// and 170 once every member has given back what it held beyond its share.
func TestShareMaxMinFair(t *testing.T) {
	for _, b := range shareBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			demands := []int64{1000, 200, 50, 10} // the largest first: it holds most, then gives back
			var g tollgate.ShareGrant
			for round := range 3 {
				for i, d := range demands {
					g = reportShare(t, b.store, "api", fmt.Sprint("m", i), 400, d, time.Minute)
					if round == 2 {
						want := map[int64]int64{1000: 170, 200: 170, 50: 50, 10: 10}[d]
						if g.Granted != want || g.Fair != want || g.Members != 4 {
							t.Errorf("round %d, demand %d: %+v, want granted and fair %d of 4 members", round, d, g, want)
						}
					}
				}
			}
		})
	}
}

// TestShareNeverGrantsMoreThanTheLimit makes the first member take the
// whole limit alone: a second one is granted only what the first gives
// back at its next report, so the grants held never add up to more than
// the limit.
func TestShareNeverGrantsMoreThanTheLimit(t *testing.T) {
	for _, b := range shareBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			steps := []struct {
				member        string
				granted, fair int64
			}{
				{"a", 100, 100}, {"b", 0, 50}, {"a", 50, 50}, {"b", 50, 50},
			}
			for i, s := range steps {
				g := reportShare(t, b.store, "k", s.member, 100, 1000, time.Minute)
				if g.Granted != s.granted || g.Fair != s.fair {
					t.Errorf("step %d (%s): %+v, want granted %d, fair %d", i, s.member, g, s.granted, s.fair)
				}
			}
		})
	}
}

// TestShareSilentMemberLeaves lets one member's TTL run out: the other is
// granted the whole limit at its next report, and the key expires once
// every member has left.
func TestShareSilentMemberLeaves(t *testing.T) {
	for _, b := range shareBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			const ttl = time.Second
			reportShare(t, b.store, "k", "gone", 100, 1000, ttl)
			reportShare(t, b.store, "k", "stays", 100, 1000, ttl)
			if g := reportShare(t, b.store, "k", "stays", 100, 1000, ttl); g.Granted != 0 || g.Members != 2 {
				t.Fatalf("before the silent member's TTL ends: %+v, want nothing granted of 2 members", g)
			}
			b.advance(ttl + 100*time.Millisecond)
			if g := reportShare(t, b.store, "k", "stays", 100, 1000, ttl); g.Granted != 100 || g.Members != 1 {
				t.Fatalf("after it: %+v, want the whole limit, alone", g)
			}
			if b.name == "memory" {
				return // the Memory store drops keys at its sweep, not by a timer
			}
			b.advance(ttl + 100*time.Millisecond)
			if n := b.keys(t); n != 0 {
				t.Errorf("%d keys left after every member left, want 0", n)
			}
		})
	}
}

// TestShareBadInputStoresNothing gives the stores every kind of bad
// report: each is an error wrapping ErrInvalidRequest and nothing is
// stored.
func TestShareBadInputStoresNothing(t *testing.T) {
	bad := []tollgate.Share{
		{Key: "k", Member: "", Limit: 10, Demand: 1, TTL: time.Second},
		{Key: "k", Member: "has space", Limit: 10, Demand: 1, TTL: time.Second},
		{Key: "k", Member: "m", Limit: 0, Demand: 1, TTL: time.Second},
		{Key: "k", Member: "m", Limit: 10, Demand: -1, TTL: time.Second},
		{Key: "k", Member: "m", Limit: 10, Demand: tollgate.MaxRate + 1, TTL: time.Second},
		{Key: "k", Member: "m", Limit: 10, Demand: 1, TTL: 0},
		{Key: "k", Member: "m", Limit: 10, Demand: 1, TTL: -time.Second},
	}
	for _, b := range shareBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			for _, s := range bad {
				if _, err := b.store.Share(context.Background(), s); !errors.Is(err, tollgate.ErrInvalidRequest) {
					t.Errorf("%+v: error %v, want ErrInvalidRequest", s, err)
				}
			}
			if n := b.keys(t); n != 0 {
				t.Errorf("%d keys stored for bad reports, want 0", n)
			}
		})
	}
}

// TestShareMembersBounded fills a limit with MaxShareMembers members: one
// more is granted nothing and not recorded.
func TestShareMembersBounded(t *testing.T) {
	for _, b := range shareBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			for i := range tollgate.MaxShareMembers {
				reportShare(t, b.store, "k", fmt.Sprint("m", i), 1000, 1, time.Minute)
			}
			if g := reportShare(t, b.store, "k", "late", 1000, 1, time.Minute); g.Granted != 0 || g.Members != tollgate.MaxShareMembers {
				t.Fatalf("member %d: %+v, want nothing granted", tollgate.MaxShareMembers+1, g)
			}
			// Its demand, 1, and (1000-256)/512 of the spare.
			if g := reportShare(t, b.store, "k", "m0", 1000, 1, time.Minute); g.Granted != 2 || g.Members != tollgate.MaxShareMembers {
				t.Fatalf("a member already in: %+v, want its demand of %d members", g, tollgate.MaxShareMembers)
			}
		})
	}
}

// TestShareConcurrentReports has 32 members report changing demands from
// as many goroutines, each on its own client of the store: the grants
// held, read back at the end, never add up to more than the limit.
func TestShareConcurrentReports(t *testing.T) {
	for _, b := range shareBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			const members, limit = 32, 1000
			var wg sync.WaitGroup
			last := make([]int64, members)
			for i := range members {
				wg.Go(func() {
					for r := range 20 {
						g, err := b.store.Share(context.Background(), tollgate.Share{Key: "hot", Member: fmt.Sprint("m", i), Limit: limit, Demand: int64((i*7+r*13)%100 + 1), TTL: time.Minute})
						if err != nil {
							t.Error(err)
							return
						}
						last[i] = g.Granted
					}
				})
			}
			wg.Wait()
			sum := int64(0)
			for _, g := range last {
				sum += g
			}
			if sum > limit {
				t.Errorf("the last grants add up to %d, more than the limit %d", sum, limit)
			}
		})
	}
}

// TestShareScriptMatchesMemory runs one random sequence of reports on the
// Memory store and on Redis: every grant is the same.
func TestShareScriptMatchesMemory(t *testing.T) {
	bs := shareBackends(t)
	mem, red := bs[0].store, bs[1].store
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		s := tollgate.Share{Key: fmt.Sprint("k", rng.IntN(3)), Member: fmt.Sprint("m", rng.IntN(6)), Limit: int64(1 + rng.IntN(1000)), Demand: int64(rng.IntN(600)), TTL: time.Minute}
		gm, err := mem.Share(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		gr, err := red.Share(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		if gm != gr {
			t.Fatalf("report %d %+v: Memory %+v, Redis %+v", i, s, gm, gr)
		}
	}
}

// TestShareBoundedByDeadline pauses Redis (CLIENT PAUSE) under a client
// that does not end commands at their context's end: a Share under a
// 100ms deadline still returns at it, with the deadline's error.
func TestShareBoundedByDeadline(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedis(t, srv.Client(t))
	reportShare(t, st, "k", "m", 10, 1, time.Minute) // the script loaded, the connection open
	ends := srv.Pause(t, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := st.Share(ctx, tollgate.Share{Key: "k", Member: "m", Limit: 10, Demand: 1, TTL: time.Minute})
	// Returned while Redis was still paused: at its deadline, not when Redis
	// answered (no timed bound: a busy machine).
	if took := time.Since(start); time.Now().After(ends) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Share with Redis paused: %v after %s, want the deadline's error before the pause ended", err, took)
	}
	srv.AwaitAnswer(t, 5*time.Second)
}
