package store

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// foldedStores returns n stores on srv, each on a client of its own, and a
// function reporting how many script calls srv has run so far.
func foldedStores(t *testing.T, srv *redistest.Server, n int) ([]*Redis, func() int64) {
	prefix := redistest.KeyPrefix(t)
	var stores []*Redis
	for range n {
		stores = append(stores, newRedis(t, srv.Client(t), WithPrefix(prefix), WithDenyCache(0)))
	}
	scripts := func() int64 {
		a, _, _ := commandStats(t, srv, "evalsha")
		b, _, _ := commandStats(t, srv, "eval")
		return a + b
	}
	return stores, scripts
}

// checkFolded fails the test unless ops operations took fewer script calls.
func checkFolded(t *testing.T, ops, scripts int64) {
	t.Helper()
	t.Logf("%d operations in %d script calls", ops, scripts)
	if scripts >= ops {
		t.Fatalf("%d operations took %d script calls: none was folded, the test proves nothing", ops, scripts)
	}
}

func TestFoldedSeatCallsHoldAtMostMax(t *testing.T) {
	srv := redistest.Start(t) // private: the script counts must be this test's alone
	stores, scripts := foldedStores(t, srv, 3)
	ctx := context.Background()
	const held = 3
	var ids, holding, most, denied atomic.Int64
	before := scripts()
	const callers, calls = 96, 20
	admitted := redistest.Hammer(t, len(stores), callers, calls, func(i int) (bool, error) {
		s := tollgate.Seat{Key: "tenant", Max: held, ID: "c" + strconv.FormatInt(ids.Add(1), 10), TTL: time.Minute}
		d, err := stores[i].AcquireSeat(ctx, s)
		if err != nil || !d.Allowed {
			denied.Add(1)
			return false, err
		}
		n := holding.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		holding.Add(-1)
		return true, stores[i].ReleaseSeat(ctx, s)
	})
	checkFolded(t, callers*calls+admitted, scripts()-before)
	if most.Load() > held || admitted == 0 || denied.Load() == 0 {
		t.Fatalf("at most %d held at once (max %d), %d admitted, %d denied", most.Load(), held, admitted, denied.Load())
	}
	if n, err := stores[0].SeatsInUse(ctx, "tenant"); err != nil || n != 0 {
		t.Fatalf("SeatsInUse after every release = %d, %v; want 0", n, err)
	}

	// Without releases: exactly the most seats are taken.
	before = scripts()
	admitted = redistest.Hammer(t, len(stores), callers, 1, func(i int) (bool, error) {
		d, err := stores[i].AcquireSeat(ctx, tollgate.Seat{Key: "exact", Max: 7, ID: "e" + strconv.FormatInt(ids.Add(1), 10), TTL: time.Minute})
		return d.Allowed, err
	})
	checkFolded(t, callers, scripts()-before)
	if n, err := stores[1].SeatsInUse(ctx, "exact"); admitted != 7 || err != nil || n != 7 {
		t.Fatalf("%d acquires admitted, %d in use (%v); want 7 and 7", admitted, n, err)
	}
}

// Admit calls are not folded (fold.go), but they go through the same
// batcher as seat calls: concurrent ones stay all or nothing and exact.
func TestConcurrentAdmitCallsExact(t *testing.T) {
	srv := redistest.Start(t)
	stores, _ := foldedStores(t, srv, 3)
	ctx := context.Background()
	var ids atomic.Int64
	const callers = 96
	admit := func(key string, max int64, limit tollgate.Limit) func(int) (bool, error) {
		return func(i int) (bool, error) {
			id := "a" + strconv.FormatInt(ids.Add(1), 10)
			sd, ds, err := stores[i].AllowAllWithSeat(ctx, tollgate.Seat{Key: key, Max: max, ID: id, TTL: time.Minute},
				[]tollgate.Request{{Key: key, Limit: limit, RequestID: id}})
			if err != nil || !sd.Allowed {
				return false, err
			}
			if !ds[0].Allowed {
				t.Errorf("seat taken for a denied decision: %+v", ds[0])
			}
			return true, nil
		}
	}
	// The rate decides: ten tokens, and a seat for every admitted call only.
	got := redistest.Hammer(t, len(stores), callers, 1, admit("rate", 1000, tollgate.PerMinute(10)))
	if n, err := stores[0].SeatsInUse(ctx, "rate"); got != 10 || err != nil || n != 10 {
		t.Fatalf("%d admitted, %d seats in use (%v); want 10 and 10", got, n, err)
	}
	// The seats decide: four, and no debit for a call refused a seat.
	got = redistest.Hammer(t, len(stores), callers, 1, admit("seats", 4, tollgate.PerMinute(1000)))
	// Peek answers what Allow would: the remaining after one more unit.
	d, err := stores[2].Peek(ctx, tollgate.Request{Key: "seats", Limit: tollgate.PerMinute(1000)})
	if got != 4 || err != nil || d.Remaining != 1000-4-1 {
		t.Fatalf("%d admitted, remaining %d (%v); want 4 and %d", got, d.Remaining, err, 1000-4-1)
	}
}

// foldCounter is a go-redis hook counting the seat script calls that
// carried several operations, sent alone or in a pipeline.
type foldCounter struct{ folds atomic.Int64 }

func (f *foldCounter) count(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) > 2 && (args[1] == seatScript.sha || args[1] == seatScript.src) && args[2].(int64) > 2 {
		f.folds.Add(1)
	}
}

func (*foldCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *foldCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f.count(cmd)
		return next(ctx, cmd)
	}
}
func (f *foldCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			f.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// On a Cluster in the tagged layout, seat calls fold by Cluster slot: the
// calls on one identity's seats share a script call, and stay exact.
func TestFoldedSeatCallsOnATaggedCluster(t *testing.T) {
	ctx := context.Background()
	var stores []*Redis
	f := &foldCounter{}
	prefix := redistest.KeyPrefix(t)
	for range 3 {
		c := redistest.SharedCluster(t).Client(t)
		c.AddHook(f)
		stores = append(stores, newRedis(t, c, WithPrefix(prefix), WithDenyCache(0), WithClusterTags(6)))
	}
	var ids atomic.Int64
	admitted := redistest.Hammer(t, len(stores), 96, 1, func(i int) (bool, error) {
		d, err := stores[i].AcquireSeat(ctx, tollgate.Seat{Key: "exact", Max: 7, ID: "e" + strconv.FormatInt(ids.Add(1), 10), TTL: time.Minute})
		return d.Allowed, err
	})
	if n, err := stores[0].SeatsInUse(ctx, "exact"); admitted != 7 || err != nil || n != 7 {
		t.Fatalf("%d acquires admitted, %d in use (%v); want 7 and 7", admitted, n, err)
	}
	t.Logf("%d seat script calls carried several operations", f.folds.Load())
	if f.folds.Load() == 0 {
		t.Fatal("no seat script call carried several operations: nothing was folded, the test proves nothing")
	}
}
