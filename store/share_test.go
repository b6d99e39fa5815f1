package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
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

// TestShareScriptMatchesMemory runs one random sequence of reports (open
// members, and groups with floors, windows moving on, holds, report
// numbers, disagreeing and late reports, the store forgetting everything)
// on the Memory store and on Redis, a single node and a Cluster: every
// answer is the same. Leases are a minute, so that both clocks agree on
// what is live; it runs once with every mark fresh (the store settling)
// and once with every mark an hour old.
func TestShareScriptMatchesMemory(t *testing.T) {
	for _, b := range shareBackends(t)[1:] {
		red := b.store.(*Redis)
		for _, settled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/settled=%v", b.name, settled), func(t *testing.T) {
				prefix := redistest.KeyPrefix(t)
				red := newRedis(t, red.client, WithPrefix(prefix))
				mem := newMemory(t)
				if settled {
					ageMarks(t, red, mem, time.Hour)
				}
				rng := rand.New(rand.NewPCG(1, 2))
				seqs := map[string]int64{}
				windows := map[string]int64{}
				for i := range 800 {
					s := randomShare(rng, seqs, windows)
					if rng.IntN(200) == 0 {
						forgetAll(t, red, mem)
						if settled {
							ageMarks(t, red, mem, time.Hour)
						}
					}
					gm, err := mem.ShareAll(context.Background(), []tollgate.Share{s})
					if err != nil {
						t.Fatal(err)
					}
					gr, err := red.ShareAll(context.Background(), []tollgate.Share{s})
					if err != nil {
						t.Fatal(err)
					}
					if m, r := stripGrant(gm[0]), stripGrant(gr[0]); !reflect.DeepEqual(m, r) {
						t.Fatalf("report %d %+v:\nMemory %+v\nRedis  %+v", i, s, m, r)
					}
				}
			})
		}
	}
}

// randomShare is one report of a random sequence: three groups of up to
// three members on two rate keys and two window keys, or an open member.
func randomShare(rng *rand.Rand, seqs, windows map[string]int64) tollgate.Share {
	key := fmt.Sprint("k", rng.IntN(4))
	g := rng.IntN(3)
	s := tollgate.Share{Key: key, Member: fmt.Sprint("g", g, "p", rng.IntN(3)), Group: fmt.Sprint("g", g),
		Limit: 900, Demand: rng.Int64N(1500), TTL: time.Minute, Groups: 3, Floor: 30, Hold: rng.Int64N(400)}
	if rng.IntN(6) == 0 { // an open member on a key of its own
		return tollgate.Share{Key: "open", Member: fmt.Sprint("o", rng.IntN(5)), Limit: 1000, Demand: rng.Int64N(600), TTL: time.Minute}
	}
	if rng.IntN(40) == 0 {
		s.Floor = 31 // disagrees
	}
	id := key + s.Member
	if rng.IntN(20) == 0 {
		s.Seq = seqs[id] // late: not above the last
	} else {
		seqs[id]++
		s.Seq = seqs[id]
	}
	if key == "k2" || key == "k3" {
		w := windows[id]
		if w == 0 {
			w = 100
		}
		if rng.IntN(12) == 0 {
			w++
		}
		windows[id] = w
		s.Window, s.Used, s.WindowTTL = w, rng.Int64N(300), 2*time.Minute
		if rng.IntN(40) == 0 {
			s.Window = w - 1 // stale for the member
		}
	}
	return s
}

// stripGrant drops what depends on when each store ran: the clock, the
// leases left, and how long the settling lasts (but not whether it does).
func stripGrant(g tollgate.ShareGrant) tollgate.ShareGrant {
	g.At = time.Time{}
	if g.Settling > 0 {
		g.Settling = 1
	}
	for i := range g.Others {
		g.Others[i].Left = 0
	}
	return g
}

// forgetAll makes both stores forget every share, as a flushed Redis.
func forgetAll(t *testing.T, red *Redis, mem *Memory) {
	t.Helper()
	mem.shares.forget()
	err := forEachPrimary(red.client, func(c *redis.Client) error {
		ks, err := c.Keys(context.Background(), red.prefix+"*").Result()
		if err != nil || len(ks) == 0 {
			return err
		}
		for _, k := range ks {
			if err := c.Del(context.Background(), k).Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// ageMarks writes every slot's mark as written age ago by the server
// process that serves it, on both stores: their memory is that old.
func ageMarks(t *testing.T, red *Redis, mem *Memory, age time.Duration) {
	t.Helper()
	mem.shares.mu.Lock()
	if mem.shares.marks == nil {
		mem.shares.keys, mem.shares.marks = map[string]*memShareKey{}, map[int]memMark{}
	}
	for i := range shareSlots {
		mem.shares.marks[i] = memMark{born: mem.clock().Add(-age).UnixMicro(), until: mem.clock().Add(48 * time.Hour).UnixMicro()}
	}
	mem.shares.mu.Unlock()
	born := time.Now().Add(-age).UnixMicro()
	marks := map[int]string{}
	for i := 0; len(marks) < shareSlots; i++ {
		key := fmt.Sprint("slot", i)
		if _, ok := marks[shareSlot(key)]; !ok {
			_, marks[shareSlot(key)] = red.shareKeys(key)
		}
	}
	ctx := context.Background()
	for _, mark := range marks {
		var c *redis.Client
		switch cl := red.client.(type) {
		case *redis.Client:
			c = cl
		case *redis.ClusterClient:
			var err error
			if c, err = cl.MasterForKey(ctx, mark); err != nil {
				t.Fatal(err)
			}
		}
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		_, run, _ := strings.Cut(info, "run_id:")
		run, _, _ = strings.Cut(run, "\r")
		if err := c.Set(ctx, mark, fmt.Sprintf("%d %s", born, run), 48*time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// forEachPrimary runs f on c, or on each primary of a Cluster client.
func forEachPrimary(c redis.UniversalClient, f func(*redis.Client) error) error {
	if cl, ok := c.(*redis.ClusterClient); ok {
		return cl.ForEachMaster(context.Background(), func(_ context.Context, n *redis.Client) error { return f(n) })
	}
	return f(c.(*redis.Client))
}

// TestShareBoundedByDeadline pauses Redis (CLIENT PAUSE) under a client
// that does not end commands at their context's end: a Share under a
// 100ms deadline still returns at it, with the deadline's error.
func TestShareBoundedByDeadline(t *testing.T) {
	redistest.SkipFaultShort(t)
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

// groupShare is a report of member of group (one of two groups sharing
// 600 with a floor of 20 each) with the given demand, hold, number and
// lease.
func groupShare(group string, demand, hold, seq int64, lease time.Duration) tollgate.Share {
	return tollgate.Share{Key: "k", Member: group + "1", Group: group, Limit: 600, Demand: demand, TTL: lease,
		Groups: 2, Floor: 20, Hold: hold, Seq: seq}
}

// shareOf reports s on b, failing the test on an error or a refusal.
func shareOf(t *testing.T, b shareBackend, s tollgate.Share) tollgate.ShareGrant {
	t.Helper()
	g, err := b.store.Share(context.Background(), s)
	if err != nil || g.Refused != nil {
		t.Fatalf("%+v: %+v, %v", s, g, err)
	}
	return g
}

// settledBackends are the share backends with every mark an hour old: a
// store that has not forgotten anything for longer than any lease.
func settledBackends(t *testing.T) []shareBackend {
	bs := shareBackends(t)
	mem := bs[0].store.(*Memory)
	for _, b := range bs[1:] {
		ageMarks(t, b.store.(*Redis), mem, time.Hour)
	}
	return bs
}

// oldKey makes the key "k" with a report of a that lasts a minute, and
// lets more than the leases of the steps that follow (300 ms) pass: the
// key is no longer new, so a group not heard of asks nothing.
func oldKey(t *testing.T, b shareBackend) {
	t.Helper()
	shareOf(t, b, groupShare("a", 0, 20, 1, time.Minute))
	b.advance(350 * time.Millisecond)
}

// TestShareGroupsSumDemands has a group of two members asking 300 each
// and a group of one asking 600: the groups are max-min fair by their
// demands summed (each 280 above its floor), every member of a group is
// granted the group's share, and the store counts the group for the
// largest share one of its members holds.
func TestShareGroupsSumDemands(t *testing.T) {
	for _, b := range settledBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			a2 := groupShare("a", 300, 20, 1, time.Minute)
			a2.Member = "a2"
			for round := range 2 {
				for _, s := range []tollgate.Share{groupShare("a", 300, 20, int64(round+1), time.Minute), a2, groupShare("b", 600, 20, int64(round+1), time.Minute)} {
					g := shareOf(t, b, s)
					if round == 1 && (g.Fair != 300 || g.Granted != 300) {
						t.Errorf("%s: %+v, want a fair share and a grant of 300 (20 + half the 560 the floors leave)", s.Member, g)
					}
				}
				a2.Seq++
			}
			g := shareOf(t, b, groupShare("b", 600, 300, 3, time.Minute))
			if len(g.Others) != 1 || g.Others[0].Group != "a" || g.Others[0].Members != 2 || g.Others[0].Share != 300 || g.Others[0].Demand != 600 {
				t.Errorf("the other groups: %+v, want a of 2 members holding 300, asking 600", g.Others)
			}
		})
	}
}

// TestShareHoldIsNeverCountedLess has a member hold more than it is
// granted: its group counts for what it holds until it reports the
// smaller share, and only then may the other group be granted the
// difference.
func TestShareHoldIsNeverCountedLess(t *testing.T) {
	for _, b := range settledBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			oldKey(t, b)
			lease := 300 * time.Millisecond
			for i, step := range []struct {
				group              string
				demand, hold, want int64
			}{
				{"a", 1000, 20, 580},  // all but b's floor
				{"a", 100, 580, 340},  // 100 and half what is left: it still holds 580
				{"b", 1000, 20, 20},   // a is counted for 580
				{"a", 100, 340, 100},  // it took 340, and is granted 100 now
				{"b", 1000, 20, 260},  // a is counted for 340
				{"a", 100, 100, 100},  // it took 100
				{"b", 1000, 260, 500}, // the rest
			} {
				g := shareOf(t, b, groupShare(step.group, step.demand, step.hold, int64(i+2), lease))
				if g.Granted != step.want {
					t.Fatalf("step %d, %s asking %d, holding %d: %+v, want %d granted", i, step.group, step.demand, step.hold, g, step.want)
				}
			}
		})
	}
}

// TestShareLateReportChangesNothing sends a member's reports out of
// order: one not numbered above the last the store holds is refused and
// changes nothing.
func TestShareLateReportChangesNothing(t *testing.T) {
	for _, b := range settledBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			oldKey(t, b)
			lease := 300 * time.Millisecond
			if g := shareOf(t, b, groupShare("a", 1000, 20, 3, lease)); g.Granted != 580 {
				t.Fatalf("a: %+v, want 580", g)
			}
			g, err := b.store.Share(context.Background(), groupShare("a", 50, 20, 2, lease))
			if err != nil || !errors.Is(g.Refused, tollgate.ErrShareLate) {
				t.Fatalf("report 2 after 3: %+v, %v; want refused as late", g, err)
			}
			if g := shareOf(t, b, groupShare("b", 1000, 20, 1, lease)); g.Granted != 20 || len(g.Others) != 1 || g.Others[0].Share != 580 {
				t.Fatalf("b: %+v, want its floor, a still holding 580", g)
			}
		})
	}
}

// TestShareWindowUseOutlivesLease has a member's lease on a window's
// share end: its group still counts for that share, as it may have used
// it, for as long as the store keeps the group's use of the window.
func TestShareWindowUseOutlivesLease(t *testing.T) {
	for _, b := range settledBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := func(group string, demand, used int64, lease time.Duration, seq int64) tollgate.Share {
				return tollgate.Share{Key: "q", Member: group + "1", Group: group, Limit: 1000, Demand: demand, TTL: lease,
					Groups: 2, Floor: 10, Hold: 10, Seq: seq, Window: 7, Used: used, WindowTTL: time.Minute}
			}
			shareOf(t, b, w("a", 0, 0, time.Minute, 1))
			b.advance(350 * time.Millisecond)
			if g := shareOf(t, b, w("a", 2000, 100, 300*time.Millisecond, 2)); g.Granted != 990 {
				t.Fatalf("a alone: %+v, want all but b's floor", g)
			}
			b.advance(400 * time.Millisecond) // a's lease ends
			g := shareOf(t, b, w("b", 2000, 0, time.Minute, 1))
			if g.Granted != 10 || len(g.Others) != 1 || g.Others[0].Share != 990 || g.Others[0].Members != 0 || g.Others[0].Used != 100 {
				t.Fatalf("b once a's lease ended: %+v, want its floor, a counted for the 990 it may have used", g)
			}
		})
	}
}

// TestShareSettlesAfterForgetting makes the store forget (a flush): for a
// lease from then, no member is granted more than it says it holds (or
// its group's floor), and the store counts what the members say they
// hold; then it grants by demand again.
func TestShareSettlesAfterForgetting(t *testing.T) {
	for _, b := range settledBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			oldKey(t, b)
			lease := 300 * time.Millisecond
			if g := shareOf(t, b, groupShare("a", 1000, 20, 2, lease)); g.Granted != 580 || g.Settling != 0 {
				t.Fatalf("a: %+v, want 580, settled", g)
			}
			switch st := b.store.(type) {
			case *Memory:
				st.shares.forget()
			case *Redis:
				if err := forEachPrimary(st.client, func(c *redis.Client) error { return c.FlushAll(context.Background()).Err() }); err != nil {
					t.Fatal(err)
				}
			}
			if g := shareOf(t, b, groupShare("b", 1000, 20, 1, lease)); g.Granted != 20 || g.Settling <= 0 {
				t.Fatalf("b after the store forgot a's 580: %+v, want its floor, settling", g)
			}
			shareOf(t, b, groupShare("a", 1000, 580, 3, lease)) // a says it holds 580
			if g := shareOf(t, b, groupShare("b", 1000, 20, 2, lease)); g.Granted != 20 {
				t.Fatalf("b while a holds 580: %+v, want its floor", g)
			}
			b.advance(lease + 50*time.Millisecond)
			if g := shareOf(t, b, groupShare("b", 1000, 20, 3, lease)); g.Settling != 0 || g.Granted <= 20 {
				t.Fatalf("b a lease later: %+v, want it settled, granted by demand", g)
			}
		})
	}
}

// TestShareFindsANewServer promotes a replica that holds every write, and
// restarts a Redis without persistence: either way the server process that
// wrote the marks is gone, and the store settles for a lease.
func TestShareFindsANewServer(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedis(t, srv.Client(t))
	s := tollgate.Share{Key: "k", Member: "a1", Group: "a", Limit: 600, Demand: 1000, TTL: time.Minute, Groups: 2, Floor: 20, Hold: 20, Seq: 1}
	if g, err := st.Share(context.Background(), s); err != nil || g.Settling != time.Minute {
		t.Fatalf("a new server: %+v, %v; want settling for a lease", g, err)
	}
	replica := redistest.Replica(t, srv)
	if err := srv.Client(t).Do(context.Background(), "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	rc := replica.Client(t)
	if err := rc.SlaveOf(context.Background(), "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	s.Seq = 2
	if g, err := newRedis(t, rc).Share(context.Background(), s); err != nil || g.Settling != time.Minute {
		t.Fatalf("on the promoted replica, which holds the marks of another process: %+v, %v; want a settling of a lease afresh", g, err)
	}
	srv.Restart(t)
	s.Seq = 3
	if g, err := st.Share(context.Background(), s); err != nil || g.Settling != time.Minute || g.Granted != 20 {
		t.Fatalf("on the restarted server: %+v, %v; want a settling of a lease afresh, the floor", g, err)
	}
}
