package store

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/redistest"
)

// Memory under churn: identities that come once and never again must cost
// nothing once their state stops mattering. TestChurn runs a short version
// in the normal suite; TestChurnSoak (TOLLGATE_SOAK=1) runs the long one
// whose figures are in the README.

// churnTTL is the period of the churn limits, and so about how long an
// identity's state lives; request-id markers get it too.
const churnTTL = 300 * time.Millisecond

// churnRequest returns the i-th request of a churn run: a new identity each
// time, the four algorithms in turn, one request in four with a request id.
func churnRequest(run string, i int, period time.Duration) tollgate.Request {
	req := tollgate.Request{
		Key:   run + strconv.Itoa(i),
		Limit: tollgate.Limit{Algorithm: algorithms[i%len(algorithms)], Rate: 5, Period: period, Burst: 5},
	}
	if i%4 == 0 {
		req.RequestID = "r" + strconv.Itoa(i)
	}
	return req
}

// churnLoad makes decisions on st for new identities from callers
// goroutines, until it has used at least identities of them and run at
// least minDuration, and returns how many it used. Each decision gets
// timeout as its deadline, or none when timeout is 0. Any error fails the
// test.
func churnLoad(t *testing.T, st tollgate.Store, run string, identities int, minDuration, period time.Duration, callers int, timeout time.Duration) int {
	t.Helper()
	var next atomic.Int64
	var failed atomic.Bool
	start := time.Now()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= identities && time.Since(start) >= minDuration {
					return
				}
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if timeout > 0 {
					ctx, cancel = context.WithTimeout(ctx, timeout)
				}
				_, err := st.Allow(ctx, churnRequest(run, i, period))
				cancel()
				if err != nil {
					failed.Store(true)
					t.Errorf("decision %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() {
		t.FailNow()
	}
	return int(next.Load()) - callers
}

// sampleEvery calls f every d until the returned stop is called.
func sampleEvery(d time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				f()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// keyspace returns db0's key count and how many of them have a TTL, from
// INFO keyspace: exact and O(1), so it can be read under load.
func keyspace(t *testing.T, srv *redistest.Server) (keys, expires int64) {
	t.Helper()
	for _, f := range strings.Split(srv.Info(t, "keyspace", "db0"), ",") {
		name, v, _ := strings.Cut(f, "=")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch name {
		case "keys":
			keys = n
		case "expires":
			expires = n
		}
	}
	return keys, expires
}

// usedMemory returns INFO memory's used_memory.
func usedMemory(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	n, _ := strconv.ParseInt(srv.Info(t, "memory", "used_memory"), 10, 64)
	return n
}

// churnRedis runs a churn on a private redis-server and checks that no key
// ever lacks a TTL and that, once the TTLs pass, Redis holds nothing.
func churnRedis(t *testing.T, identities int, minDuration time.Duration, callers int) {
	srv := redistest.Start(t) // private: its whole keyspace is this run's
	st := newRedis(t, srv.Client(t), WithReplayTTL(churnTTL))
	baseline := usedMemory(t, srv)
	var peakKeys, peakMemory, noTTL atomic.Int64
	sample := func() {
		keys, expires := keyspace(t, srv)
		peakKeys.Store(max(peakKeys.Load(), keys))
		peakMemory.Store(max(peakMemory.Load(), usedMemory(t, srv)-baseline))
		noTTL.Store(max(noTTL.Load(), keys-expires))
	}
	stop := sampleEvery(50*time.Millisecond, sample)
	start := time.Now()
	used := churnLoad(t, st, "churn:", identities, minDuration, churnTTL, callers, 5*time.Second)
	elapsed := time.Since(start)
	stop()
	sample()
	last := time.Now()

	// Redis deletes expired keys in the background (and on access): wait
	// for the last of them.
	var keys int64
	redistest.Await(time.Until(last.Add(30*time.Second)), func() bool {
		keys, _ = keyspace(t, srv)
		return keys == 0
	})
	empty := time.Since(last)
	t.Logf("Redis: %d identities in %s (%.0f decisions/s), peak %d keys and %d bytes over the empty server's; keys without a TTL at any sample: %d; empty %s after the last decision (TTLs %s)",
		used, elapsed.Round(time.Millisecond), float64(used)/elapsed.Seconds(), peakKeys.Load(), peakMemory.Load(),
		noTTL.Load(), empty.Round(time.Millisecond), churnTTL)
	if noTTL.Load() != 0 {
		t.Errorf("up to %d keys had no TTL during the run", noTTL.Load())
	}
	if keys != 0 {
		t.Errorf("%d keys of the run are still in Redis 30s after its last decision", keys)
	}
	if peakKeys.Load() == 0 {
		t.Error("no key was ever seen: the samples prove nothing")
	}
}

// heapInUse returns the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// churnMemory runs a churn on a Memory store bounded to bound entries, with
// state that outlives the run, so that only the bound keeps it small; then
// one with short-lived state, which later decisions reclaim.
func churnMemory(t *testing.T, identities int, minDuration time.Duration, bound int) {
	before := heapInUse()
	m := newMemory(t, WithMaxKeys(bound))
	var peak atomic.Int64
	sample := func() { peak.Store(max(peak.Load(), int64(m.Len()))) }
	stop := sampleEvery(20*time.Millisecond, sample)
	start := time.Now()
	used := churnLoad(t, m, "churn:", identities, minDuration, time.Hour, runtime.GOMAXPROCS(0), 0)
	elapsed := time.Since(start)
	stop()
	sample()
	held := int64(heapInUse()) - int64(before)
	t.Logf("Memory bound %d: %d identities in %s (%.0f decisions/s), peak %d entries, %d bytes of heap held at the end (%.0f per entry)",
		bound, used, elapsed.Round(time.Millisecond), float64(used)/elapsed.Seconds(), peak.Load(), held,
		float64(held)/float64(max(m.Len(), 1)))
	if peak.Load() > int64(bound) || m.Len() > bound {
		t.Errorf("the store held %d entries (peak %d), more than its bound %d", m.Len(), peak.Load(), bound)
	}
	runtime.KeepAlive(m)

	// Short-lived state: once its TTL passed, ordinary decisions on a few
	// live identities reclaim it, with no goroutine of the store's own.
	clock := fakeclock.New(time.Now())
	short := newMemory(t, WithReplayTTL(churnTTL), WithClock(clock.Now))
	n := min(identities, 20_000)
	churnLoad(t, short, "short:", n, 0, churnTTL, runtime.GOMAXPROCS(0), 0)
	afterRun := short.Len()
	clock.Advance(2 * churnTTL)
	// 64 live identities hold at most 80 entries: their states and the
	// markers of the one in four with a request id.
	const live, liveEntries = 64, 80
	decisions := 0
	for short.Len() > liveEntries && decisions < 100*n {
		if _, err := short.Allow(context.Background(), churnRequest("live:", decisions%live, churnTTL)); err != nil {
			t.Fatal(err)
		}
		decisions++
	}
	t.Logf("Memory, state living %s: %d entries after %d identities; %d decisions on %d live identities after the TTLs brought it to %d",
		churnTTL, afterRun, n, decisions, live, short.Len())
	if short.Len() > liveEntries {
		t.Errorf("%d entries left after the TTLs passed and %d decisions", short.Len(), decisions)
	}
}

// TestChurn: 100,000 one-time identities through a Memory store bounded to
// 10,000 entries, and 30,000 through Redis with TTLs of 300ms.
func TestChurn(t *testing.T) {
	t.Run("memory", func(t *testing.T) { churnMemory(t, 100_000, 0, 10_000) })
	t.Run("redis", func(t *testing.T) { churnRedis(t, 30_000, 0, 32) })
}

// TestChurnSoak is the long churn: at least a million one-time identities
// and at least two minutes, through a Memory store at its default bound and
// through Redis. It runs only with TOLLGATE_SOAK=1 (it takes minutes);
// TOLLGATE_SOAK_DURATION (a Go duration) and TOLLGATE_SOAK_IDENTITIES change
// its length:
//
//	TOLLGATE_SOAK=1 go test -run ChurnSoak -v -timeout 30m ./store
func TestChurnSoak(t *testing.T) {
	if os.Getenv("TOLLGATE_SOAK") != "1" {
		t.Skip("the soak takes minutes: run it with TOLLGATE_SOAK=1")
	}
	duration := 2 * time.Minute
	if v := os.Getenv("TOLLGATE_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("TOLLGATE_SOAK_DURATION: %v", err)
		}
		duration = d
	}
	identities := 1_000_000
	if v := os.Getenv("TOLLGATE_SOAK_IDENTITIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("TOLLGATE_SOAK_IDENTITIES: %v", err)
		}
		identities = n
	}
	t.Run("memory", func(t *testing.T) { churnMemory(t, identities, duration, defaultMaxKeys) })
	t.Run("redis", func(t *testing.T) { churnRedis(t, identities, duration, 64) })
}
