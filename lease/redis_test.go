package lease

import (
	"context"
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
		inners[i] = &counting{Store: store.NewRedis(c, store.WithPrefix(prefix))}
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

func TestRedisHotIdentity(t *testing.T) {
	t.Run("single", func(t *testing.T) { hotIdentity(t, false) })
	t.Run("cluster", func(t *testing.T) { hotIdentity(t, true) })
}

// hotIdentity: four replicas share one identity under a quota it stays
// below; every decision is admitted, Redis debits exactly what was admitted
// plus what the tiers still hold, and Redis decides at most one in twenty.
func hotIdentity(t *testing.T, cluster bool) {
	tiers, inners := redisTiers(t, cluster)
	limit := tollgate.PerSecond(1_000_000) // a lease is at most 10000
	const callers, calls = 64, 2000        // 128000 decisions, far below the quota
	start := time.Now()
	admitted := hammer(t, replicas, callers, calls, func(i int) (bool, error) {
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
	if h > replicas*10_000 {
		t.Errorf("%d units held, more than %d replicas × one lease of 10000", h, replicas)
	}
	perDecision := float64(redisCalls) / float64(admitted)
	if perDecision > 0.05 {
		t.Errorf("%d Redis decisions for %d decisions: %.4f each, want at most 0.05", redisCalls, admitted, perDecision)
	}
	t.Logf("%d decisions in %s on %d replicas: %d Redis decisions (%.4f per decision), %d debited, %d held",
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
		admitted := hammer(t, replicas, 64, 400, func(i int) (bool, error) {
			d, err := tiers[i].Allow(context.Background(), tollgate.Request{Key: "tenant", Limit: limit})
			return d.Allowed, err
		})
		var refill int64
		if alg == tollgate.TokenBucket || alg == tollgate.GCRA {
			refill = int64(time.Since(start)/(24*time.Hour/10_000)) + 1
		}
		var c counting
		c.calls.Store(0)
		calls, debited := sum(inners)
		c.calls.Store(calls)
		c.debited.Store(debited)
		checkTotals(t, alg.String(), tiers, &c, admitted, 10_000, refill, 100)
	}
}
