package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/store"
)

// replicas is how many tiers (each with its own go-redis client) share one
// identity, standing for replicas of a service.
const replicas = 4

// redisTiers returns replicas tiers, each over its own client of the
// shared single node or Cluster, each counting its Redis decisions.
func redisTiers(t *testing.T, cluster bool, opts ...Option) ([]*Store, []*counting) {
	t.Helper()
	prefix := redistest.KeyPrefix(t)
	tiers := make([]*Store, replicas)
	inners := make([]*counting, replicas)
	for i := range tiers {
		var c redis.UniversalClient
		if cluster {
			c = redis.NewClusterClient(redistest.SharedCluster(t).Options())
		} else {
			c = redis.NewClient(redistest.Single(t).Options())
		}
		t.Cleanup(func() { _ = c.Close() })
		inners[i] = &counting{Store: newRedis(t, c, store.WithPrefix(prefix))}
		tiers[i] = mustNew(t, inners[i], opts...)
	}
	return tiers, inners
}

func sum(cs []*counting) (calls, debited int64) {
	for _, c := range cs {
		calls += c.calls.Load()
		debited += c.debited.Load()
	}
	return calls, debited
}

// forEachBackend runs test on replicas tiers over a single Redis node, a
// Redis Cluster (each tier with its own client) and one shared Memory store.
func forEachBackend(t *testing.T, test func(t *testing.T, tiers []*Store, inners []*counting)) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "cluster"}[cluster], func(t *testing.T) {
			tiers, inners := redisTiers(t, cluster)
			test(t, tiers, inners)
		})
	}
	t.Run("memory", func(t *testing.T) {
		inners := make([]*counting, replicas)
		tiers := make([]*Store, replicas)
		shared := newMemory(t)
		for i := range tiers {
			inners[i] = &counting{Store: shared}
			tiers[i] = mustNew(t, inners[i])
		}
		test(t, tiers, inners)
	})
}

func TestHotIdentity(t *testing.T) { forEachBackend(t, hotIdentity) }

// hotIdentity: four replicas share one identity under a quota it stays
// below; every decision is admitted, Redis debits exactly what was admitted
// plus what the tiers still hold, and Redis decides at most one in twenty.
func hotIdentity(t *testing.T, tiers []*Store, inners []*counting) {
	limit := tollgate.PerSecond(1_000_000) // a lease is at most 10000
	const callers, calls = 64, 2000        // 128000 decisions, far below the quota
	start := time.Now()
	admitted := redistest.Hammer(t, replicas, callers, calls, func(i int) (bool, error) {
		d, err := tiers[i].Allow(context.Background(), tollgate.Request{Key: "tenant", Limit: limit})
		return d.Allowed, err
	})
	elapsed := time.Since(start)
	redisCalls, debited := sum(inners)
	var h int64
	for _, s := range tiers {
		h += held(s)
	}
	if admitted != callers*calls {
		t.Errorf("admitted %d of %d, under a quota none of them reached", admitted, callers*calls)
	}
	if admitted+h != debited {
		t.Errorf("admitted %d + held %d != %d debited in Redis", admitted, h, debited)
	}
	if h > 2*replicas*10_000 {
		t.Errorf("%d units held, more than %d replicas × two leases of 10000", h, replicas)
	}
	perDecision := float64(redisCalls) / float64(admitted)
	if perDecision > 0.05 {
		t.Errorf("%d inner-store decisions for %d decisions: %.4f each, want at most 0.05", redisCalls, admitted, perDecision)
	}
	t.Logf("%d decisions in %s on %d replicas: %d inner-store decisions (%.4f per decision), %d debited, %d held",
		admitted, elapsed.Round(time.Millisecond), replicas, redisCalls, perDecision, debited, h)
}

func TestRedisQuotaExhausted(t *testing.T) {
	t.Run("single", func(t *testing.T) { quotaExhausted(t, false) })
	t.Run("cluster", func(t *testing.T) { quotaExhausted(t, true) })
}

// quotaExhausted: four replicas far over the quota. Redis debits exactly
// the quota (and what refilled meanwhile), the tiers admit all of it but
// what they still hold, at most one lease each.
func quotaExhausted(t *testing.T, cluster bool) {
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.SlidingWindow, tollgate.FixedWindow} {
		tiers, inners := redisTiers(t, cluster)
		// 10000 per day: a lease is at most 100, and a minute's refill is
		// 7 units, for the token bucket and GCRA.
		limit := tollgate.Limit{Algorithm: alg, Rate: 10_000, Period: 24 * time.Hour}
		start := time.Now()
		admitted := redistest.Hammer(t, replicas, 64, 400, func(i int) (bool, error) {
			d, err := tiers[i].Allow(context.Background(), tollgate.Request{Key: "tenant", Limit: limit})
			return d.Allowed, err
		})
		var refill int64
		if alg == tollgate.TokenBucket || alg == tollgate.GCRA {
			refill = int64(time.Since(start)/(24*time.Hour/10_000)) + 1
		}
		var c counting
		calls, debited := sum(inners)
		c.calls.Store(calls)
		c.debited.Store(debited)
		checkTotals(t, alg.String(), tiers, &c, admitted, 10_000, refill, 100)
	}
}

func TestSustainedQuota(t *testing.T) { forEachBackend(t, sustainedQuota) }

// sustainedQuota: four replicas ask more than a 20k/s quota (burst 20k)
// for a window of one second. They admit no more than the quota over the window
// (burst + rate × elapsed), and what Redis debited but they did not admit
// is within the documented bound: two leases per replica held, plus two
// per replica per lifetime lost.
func sustainedQuota(t *testing.T, tiers []*Store, inners []*counting) {
	const window = time.Second
	limit := tollgate.PerSecond(20_000) // a lease is at most 200
	var admitted, attempts atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(window)
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				d, err := tiers[g%replicas].Allow(context.Background(), tollgate.Request{Key: "tenant", Limit: limit})
				if err != nil {
					errs <- err
					return
				}
				attempts.Add(1)
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	quota := limit.Burst + int64(elapsed.Seconds()*float64(limit.Rate)) + 1
	_, debited := sum(inners)
	var h int64
	for _, s := range tiers {
		h += held(s)
	}
	maxLease := int64(float64(limit.Capacity()) * defaultMaxShare)
	bound := 2 * replicas * maxLease * (1 + int64(elapsed/defaultLifetime))
	if admitted.Load() > quota || debited > quota {
		t.Errorf("admitted %d, debited %d in %s: more than the quota %d", admitted.Load(), debited, elapsed, quota)
	}
	// A denial means the bucket was empty: everything it held was debited.
	if admitted.Load() < attempts.Load() && debited < limit.Burst-1 {
		t.Errorf("debited %d, less than the burst %d, though %d of %d decisions were denied",
			debited, limit.Burst, attempts.Load()-admitted.Load(), attempts.Load())
	}
	if lost := debited - admitted.Load(); lost < h || lost > bound {
		t.Errorf("debited %d - admitted %d = %d, want between the %d held and the bound %d", debited, admitted.Load(), lost, h, bound)
	}
	t.Logf("%d decisions in %s: quota %d, debited %d, admitted %d (%.4f of the quota), held %d, bound %d",
		attempts.Load(), elapsed.Round(time.Millisecond), quota, debited, admitted.Load(), float64(admitted.Load())/float64(quota), h, bound)
}
