package store

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/internal/flight"
	"github.com/tollgate/tollgate/internal/redistest"
)

// fakeDeny is a deny cache in front of a Memory store, both on one fake
// clock: the Memory store answers exactly as the scripts do, so it stands
// for Redis with no latency.
type fakeDeny struct {
	now   time.Time
	epoch time.Time
	dc    *denyCache
	mem   *Memory
	asked int // decisions that reached the store
}

func newFakeDeny(t testing.TB, size int) *fakeDeny {
	f := &fakeDeny{now: time.Unix(1_700_000_000, 0), dc: newDenyCache(size)}
	f.epoch = f.now
	f.dc.clock = func() int64 { return int64(f.now.Sub(f.epoch)) }
	f.mem = newMemory(t, WithClock(func() time.Time { return f.now }))
	return f
}

// allow decides as Redis.Allow does around the cache, without waiting
// (these tests are sequential: a probe is always recorded before the next call).
func (f *fakeDeny) allow(t *testing.T, req tollgate.Request) (tollgate.Decision, bool) {
	t.Helper()
	req, err := check.Normalize(req)
	if err != nil {
		t.Fatal(err)
	}
	k := f.dc.key(req.Key, req.Limit.Algorithm)
	d, v, probe := f.dc.lookup(k, req.Limit, req.Cost, true)
	switch v {
	case adviceDenied:
		return d, true
	case adviceWait:
		t.Fatal("a sequential caller was told to wait: a probe was never recorded")
	}
	sent := f.dc.now()
	d, err = f.mem.Allow(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	f.asked++
	f.dc.record(k, req.Limit, req.Cost, sent, d, true, probe)
	return d, false
}

// TestDenyCacheNeverChangesAnAdmission runs one random sequence of
// requests (identities, limits of every algorithm, costs, clock steps) on
// two identical stores, one behind the deny cache, and checks that every
// decision admits exactly when the plain store admits: the cache never
// denies what the store would admit, at any instant. A denial from the
// cache carries exactly the store's RetryAfter and ResetAfter for its
// cost, also for costs larger than the one the store denied.
func TestDenyCacheNeverChangesAnAdmission(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(alg), 42))
			cached := newFakeDeny(t, 64)
			plain := newMemory(t, WithClock(func() time.Time { return cached.now }))
			limits := []tollgate.Limit{
				{Algorithm: alg, Rate: 5, Period: 50 * time.Millisecond, Burst: 8},
				{Algorithm: alg, Rate: 3, Period: 7 * time.Millisecond, Burst: 3},
				{Algorithm: alg, Rate: 1000, Period: time.Second, Burst: 20},
				{Algorithm: alg, Rate: 6, Period: 7 * time.Millisecond, Burst: 12},
			}
			if alg == tollgate.FixedWindow {
				limits[3] = tollgate.Limit{Algorithm: alg, Rate: 12, Calendar: tollgate.Day}
			}
			// Each identity keeps one limit: an identity whose limit
			// changes has state written under the old one, whose expiry
			// Redis keeps (see WithDenyCache).
			ids := []string{"a", "b", "c", "d"}
			var fromCache, admitted, largerFromCache int
			denied := map[string]int64{} // the cost the store last denied, per identity
			const steps = 20_000
			for range steps {
				// Steps from 0 to about one refill, often 0 (bursts).
				if rng.IntN(3) > 0 {
					// Whole microseconds, as Redis's TIME.
					cached.now = cached.now.Add(time.Duration(rng.Int64N(3000)) * time.Microsecond)
				}
				i := rng.IntN(len(ids))
				l := limits[i%len(limits)]
				req := tollgate.Request{Key: ids[i], Limit: l, Cost: 1 + rng.Int64N(l.Capacity())}
				if rng.IntN(4) > 0 {
					req.Cost = 1 // mostly unit costs, as most calls are
				}
				got, hit := cached.allow(t, req)
				want, err := plain.Allow(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				if got.Allowed != want.Allowed || got.RetryAfter != want.RetryAfter || got.ResetAfter != want.ResetAfter {
					t.Fatalf("%+v at %s: cached path %+v (from the cache: %v), plain store %+v",
						req, cached.now.Sub(cached.epoch), got, hit, want)
				}
				switch {
				case hit && req.Cost > denied[req.Key]:
					largerFromCache++
					fromCache++
				case hit:
					fromCache++
				case !got.Allowed:
					denied[req.Key] = req.Cost
				}
				if got.Allowed {
					admitted++
				}
			}
			t.Logf("%d decisions, %d admitted, %d denied from the cache (%d for a larger cost than the store denied), %d reached the store",
				steps, admitted, fromCache, largerFromCache, cached.asked)
			if fromCache == 0 || admitted == 0 || largerFromCache == 0 {
				t.Fatalf("%d denials from the cache (%d for larger costs), %d admissions: the sequence proves nothing", fromCache, largerFromCache, admitted)
			}
		})
	}
}

// TestDenyCacheExpiresBeforeTheStoreAdmits checks the edge: a denial with
// wait d is repeated only until slightly before d has passed since the
// request was sent, and the same cost is then asked of the store, which
// admits it at d exactly.
func TestDenyCacheExpiresBeforeTheStoreAdmits(t *testing.T) {
	f := newFakeDeny(t, 8)
	req := tollgate.Request{Key: "k", Limit: tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1, Period: time.Second, Burst: 1}}
	if d, _ := f.allow(t, req); !d.Allowed {
		t.Fatalf("first call %+v, want admitted", d)
	}
	d, hit := f.allow(t, req)
	if d.Allowed || hit || d.RetryAfter != time.Second {
		t.Fatalf("second call %+v (cache %v), want denied by the store with 1s to wait", d, hit)
	}
	slack := time.Second >> 10
	f.now = f.now.Add(time.Second - slack - time.Microsecond)
	if d, hit := f.allow(t, req); d.Allowed || !hit || d.RetryAfter != slack+time.Microsecond {
		t.Fatalf("just before the cache expires: %+v (cache %v), want a repeated denial with %s to wait", d, hit, slack+time.Microsecond)
	}
	f.now = f.now.Add(time.Microsecond)
	if d, hit := f.allow(t, req); hit || d.Allowed {
		t.Fatalf("once the cache expired, %s before the store admits: %+v (cache %v), want the store's denial", slack, d, hit)
	}
	f.now = f.now.Add(slack)
	if d, hit := f.allow(t, req); hit || !d.Allowed {
		t.Fatalf("at the wait the store named: %+v (cache %v), want the store's admission", d, hit)
	}
	// A smaller cost than the one denied is never denied by the cache.
	big := tollgate.Request{Key: "big", Limit: tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1, Period: time.Second, Burst: 4}}
	big.Cost = 3
	f.allow(t, big)
	if d, hit := f.allow(t, big); d.Allowed || hit {
		t.Fatalf("cost 3 after cost 3 with 1 left: %+v (cache %v), want the store's denial", d, hit)
	}
	big.Cost = 1
	if d, hit := f.allow(t, big); !d.Allowed || hit {
		t.Fatalf("cost 1 with 1 left after cost 3 was denied: %+v (cache %v), want the store's admission", d, hit)
	}
}

// TestDenyCacheKeepsHotEntryUnderFlood fills one shard with a hot
// identity's denial, used many times, then floods the same cache with
// thousands of denied identities: the hot entry survives, and the cache
// never holds more than its size.
func TestDenyCacheKeepsHotEntryUnderFlood(t *testing.T) {
	dc := newDenyCache(denyWays) // one shard: every identity competes for its 8 entries
	now := int64(0)
	dc.clock = func() int64 { return now }
	l := tollgate.PerMinute(1)
	denial := tollgate.Decision{RetryAfter: time.Minute, ResetAfter: time.Minute}
	hot := dc.key("hot", l.Algorithm)
	dc.record(hot, l, 1, now, denial, true, nil)
	for range 100 {
		if _, v, _ := dc.lookup(hot, l, 1, true); v != adviceDenied {
			t.Fatal("the hot identity's denial is not repeated")
		}
	}
	for i := range 10_000 {
		junk := dc.key("junk-"+strconv.Itoa(i), l.Algorithm)
		dc.record(junk, l, 1, now, denial, true, nil)
		if i%3 == 0 {
			dc.lookup(junk, l, 1, true) // the flood's entries are used too, a little
		}
	}
	if _, v, _ := dc.lookup(hot, l, 1, true); v != adviceDenied {
		t.Fatal("a flood of denied identities pushed the hot identity's entry out")
	}
	used := 0
	for i := range dc.shards {
		for _, e := range dc.shards[i].entries {
			if e.used {
				used++
			}
		}
	}
	if used > denyWays {
		t.Fatalf("%d entries in a cache of %d", used, denyWays)
	}
	// Expired entries go first: after the wait, a new identity finds room
	// without pushing out a live one.
	now += int64(time.Minute)
	fresh := dc.key("fresh", l.Algorithm)
	dc.record(fresh, l, 1, now, denial, true, nil)
	if _, v, _ := dc.lookup(fresh, l, 1, true); v != adviceDenied {
		t.Fatal("a new denial found no room among expired entries")
	}
}

// TestDenyCacheOneProbePerExpiry checks that when a remembered denial runs
// out, one caller is sent to Redis and the others wait for its answer, that
// a denial it brings back answers them all, and that a caller whose wait
// budget is spent asks Redis instead of waiting for the next probe.
func TestDenyCacheOneProbePerExpiry(t *testing.T) {
	dc := newDenyCache(64)
	now := int64(0)
	dc.clock = func() int64 { return now }
	l := tollgate.PerSecond(1)
	k := dc.key("k", l.Algorithm)
	dc.record(k, l, 1, 0, tollgate.Decision{RetryAfter: time.Second}, true, nil)
	now = int64(time.Second)
	_, v, probe := dc.lookup(k, l, 1, true)
	if v != adviceProbe {
		t.Fatalf("first caller after expiry: advice %d, want the probe", v)
	}
	var waits []*flight.Flight
	for range 10 {
		_, v, ch := dc.lookup(k, l, 1, true)
		if v != adviceWait || ch == nil {
			t.Fatalf("caller during the probe: advice %d, want to wait", v)
		}
		waits = append(waits, ch)
	}
	dc.record(k, l, 1, now, tollgate.Decision{RetryAfter: time.Second}, true, probe)
	for _, ch := range waits {
		select {
		case <-ch.Landed():
		default:
			t.Fatal("the probe was recorded but a waiter was not woken")
		}
	}
	if _, v, _ := dc.lookup(k, l, 1, true); v != adviceDenied {
		t.Fatalf("after the probe's denial: advice %d, want the new denial repeated", v)
	}
	// A probe admitted with too little room for its waiters lets the next
	// go as the new probe; a caller that spent its wait budget
	// (flight.Budget) does not wait for that one too: it asks Redis itself.
	now += int64(time.Second)
	_, v, probe = dc.lookup(k, l, 1, true)
	if v != adviceProbe {
		t.Fatal("no probe after the denial ran out")
	}
	_, _, waiter := dc.lookup(k, l, 1, true)
	dc.record(k, l, 1, now, tollgate.Decision{Allowed: true}, true, probe)
	<-waiter.Landed()
	if _, v, _ := dc.lookup(k, l, 1, false); v != adviceProbe {
		t.Fatalf("the woken caller: advice %d, want the new probe", v)
	}
	if _, v, _ := dc.lookup(k, l, 1, true); v != adviceWait {
		t.Fatalf("a new caller during the second probe: advice %d, want to wait", v)
	}
	if _, v, _ := dc.lookup(k, l, 1, false); v != adviceAsk {
		t.Fatalf("a caller out of wait budget, during the second probe: advice %d, want to ask Redis", v)
	}
	probe = nil
	for _, e := range dc.shards[k.a&dc.mask].entries {
		if e.used && e.key == k {
			probe = e.probe
		}
	}
	dc.record(k, l, 1, now, tollgate.Decision{RetryAfter: time.Second}, true, probe)
	// A probe that failed (ok false) only ends the probe.
	now += int64(2 * time.Second)
	_, v, probe = dc.lookup(k, l, 1, true)
	if v != adviceProbe {
		t.Fatal("no probe after the second expiry")
	}
	dc.record(k, l, 1, now, tollgate.Decision{}, false, probe)
	_, v, probe = dc.lookup(k, l, 1, true)
	if v != adviceProbe {
		t.Fatal("after a failed probe, the next caller is not the new probe")
	}
	// A request under another limit ends the entry and wakes the waiters:
	// it shares the state and may change it.
	_, _, waiter = dc.lookup(k, l, 1, true)
	other := tollgate.PerSecond(2)
	if _, v, _ := dc.lookup(k, other, 1, true); v != adviceAsk {
		t.Fatalf("a request under another limit: advice %d, want to ask Redis", v)
	}
	select {
	case <-waiter.Landed():
	default:
		t.Fatal("the entry ended but its waiters were not woken")
	}
	dc.record(k, l, 1, now, tollgate.Decision{}, false, probe) // the old probe is recorded late: harmless
	if _, v, _ := dc.lookup(k, l, 1, true); v != adviceAsk {
		t.Fatalf("after the entry ended: advice %d, want to ask Redis", v)
	}
}

// TestDenyCacheExactQuotaOnRedis hammers one identity's quota from 64
// goroutines over several stores with the deny cache, a quarter of the
// calls carrying fresh request ids, and checks that exactly the quota is
// admitted, as without the cache, while most denials never reached Redis.
func TestDenyCacheExactQuotaOnRedis(t *testing.T) {
	srv := redistest.Start(t) // private: its script calls are counted
	prefix := redistest.KeyPrefix(t)
	var stores []*Redis
	for range clients {
		stores = append(stores, newRedis(t, srv.Client(t), WithPrefix(prefix)))
	}
	ctx := context.Background()
	const calls = 64 * 50
	var seq atomic.Int64
	for _, alg := range algorithms {
		before, _, _ := commandStats(t, srv, "evalsha")
		req := tollgate.Request{Key: "shared", Limit: quotaLimit(alg, quota)}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := req
				for range calls / 64 {
					n := seq.Add(1)
					if n%4 == 0 {
						r.RequestID = "id-" + strconv.FormatInt(n, 10)
					} else {
						r.RequestID = ""
					}
					d, err := stores[g%len(stores)].Allow(ctx, r)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		after, _, _ := commandStats(t, srv, "evalsha")
		scripts := after - before
		t.Logf("%s: %d calls, %d admitted, %d script calls", alg, calls, admitted.Load(), scripts)
		if admitted.Load() != quota {
			t.Errorf("%s: %d admitted, want exactly %d", alg, admitted.Load(), quota)
		}
		// Every call with an id reaches Redis; of the others, only the
		// quota's, the first denials and one probe per store do.
		if scripts > calls/4+quota+int64(4*64) {
			t.Errorf("%s: %d script calls for %d calls: the cache did not spare Redis", alg, scripts, calls)
		}
	}
}

// TestDenyCacheLeavesReplaysToRedis checks that a request carrying an id
// that was admitted is replayed by Redis even while the cache holds a
// denial for its identity.
func TestDenyCacheLeavesReplaysToRedis(t *testing.T) {
	st := newRedis(t, redistest.Single(t).Client(t), WithPrefix(redistest.KeyPrefix(t)))
	ctx := context.Background()
	l := quotaLimit(tollgate.GCRA, 1)
	if d, err := st.Allow(ctx, tollgate.Request{Key: "k", Limit: l, RequestID: "call-1"}); err != nil || !d.Allowed {
		t.Fatalf("first call: %+v, %v", d, err)
	}
	for range 2 { // the second denial comes from the cache
		if d, err := st.Allow(ctx, tollgate.Request{Key: "k", Limit: l}); err != nil || d.Allowed {
			t.Fatalf("call over the quota: %+v, %v; want denied", d, err)
		}
	}
	d, err := st.Allow(ctx, tollgate.Request{Key: "k", Limit: l, RequestID: "call-1"})
	if err != nil || !d.Allowed || !d.Replayed {
		t.Fatalf("retry of the admitted call-1 while its identity's denial is cached: %+v, %v; want replayed", d, err)
	}
}

// TestDenyCacheWaiterLeavesOnTime checks that a caller waiting for another
// caller's probe returns its own context's error when that ends.
func TestDenyCacheWaiterLeavesOnTime(t *testing.T) {
	st := newRedis(t, redistest.Single(t).Client(t), WithPrefix(redistest.KeyPrefix(t)))
	var now atomic.Int64 // the cache's clock, moved by the test
	st.deny.clock = now.Load
	l := tollgate.PerSecond(1)
	req, _ := check.Normalize(tollgate.Request{Key: "k", Limit: l})
	k := st.deny.key(req.Key, l.Algorithm)
	st.deny.record(k, l, 1, st.deny.now(), tollgate.Decision{RetryAfter: 5 * time.Millisecond}, true, nil)
	now.Add(int64(6 * time.Millisecond))
	_, v, probe := st.deny.lookup(k, l, 1, true)
	if v != adviceProbe {
		t.Fatal("no probe: the entry did not run out")
	}
	// The probe is held and never recorded: the caller must wait, then leave.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := st.Allow(ctx, req)
	// The probe never ends: returning at all is the proof; 10s only keeps
	// a failure from hanging the run.
	if err == nil || ctx.Err() == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("a caller waiting on a probe that never ends: %v after %s, want its deadline's error at 30ms", err, time.Since(start))
	}
	st.deny.record(k, l, 1, 0, tollgate.Decision{}, false, probe)
}

// TestDenyCacheIgnoresADenialSentBeforeAForget: a denial whose request was
// sent before its identity's state was given back (a settlement or a
// refund landing while the decision was in flight) is not remembered; one
// sent after is.
func TestDenyCacheIgnoresADenialSentBeforeAForget(t *testing.T) {
	dc := newDenyCache(64)
	now := int64(1000)
	dc.clock = func() int64 { return now }
	l := tollgate.PerMinute(1)
	denial := tollgate.Decision{RetryAfter: time.Minute, ResetAfter: time.Minute}
	k := dc.key("a", l.Algorithm)
	sent := now
	now++
	dc.forget(k) // the give-back lands while the decision is in flight
	now++
	dc.record(k, l, 1, sent, denial, true, nil)
	if _, v, _ := dc.lookup(k, l, 1, true); v == adviceDenied {
		t.Fatal("a denial sent before the identity was given back is repeated from memory")
	}
	dc.record(k, l, 1, now, denial, true, nil)
	if _, v, _ := dc.lookup(k, l, 1, true); v != adviceDenied {
		t.Fatal("a denial sent after the give-back is not remembered")
	}
}
