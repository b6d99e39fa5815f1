package store

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

const (
	// clients is how many independent clients (connection pools) share one
	// key, standing for replicas of a service.
	clients = 4
	// callers is how many goroutines call at once, spread over the clients.
	callers = 64
	// callsEach is how many calls each goroutine makes: callers×callsEach is
	// well above the quota, so the quota is the only limit on admissions.
	callsEach = 4
	// quota is what one identity may be admitted during a test.
	quota = 100
)

// exactQuota checks that callers goroutines over clients stores admit exactly
// quota on one key, for every algorithm.
func exactQuota(t *testing.T, stores []*Redis) {
	ctx := context.Background()
	for _, alg := range algorithms {
		req := tollgate.Request{Key: "shared", Limit: quotaLimit(alg, quota)}
		admitted := redistest.Hammer(t, len(stores), callers, callsEach, func(i int) (bool, error) {
			d, err := stores[i].Allow(ctx, req)
			return d.Allowed, err
		})
		if admitted != quota {
			t.Errorf("%s: %d goroutines over %d clients made %d calls and %d were admitted, want exactly %d",
				alg, callers, len(stores), callers*callsEach, admitted, quota)
		}
	}
}

func TestRedisExactQuotaUnderConcurrency(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		prefix := redistest.KeyPrefix(t)
		var stores []*Redis
		for _, c := range clientsLike(t, c, clients) {
			stores = append(stores, newRedis(t, c, WithPrefix(prefix)))
		}
		exactQuota(t, stores)
	})
}

// getThenSetTake is the check-then-act token bucket that the scripts
// replace: read the tokens, decide in the application, write the new count.
// Refill is left out: with a quota per week it would add nothing within a
// test, and the race is between the read and the write.
func getThenSetTake(ctx context.Context, c *redis.Client, key string) (bool, error) {
	tokens, err := c.Get(ctx, key).Int64()
	if errors.Is(err, redis.Nil) {
		tokens, err = quota, nil
	}
	if err != nil || tokens < 1 {
		return false, err
	}
	return true, c.Set(ctx, key, tokens-1, time.Minute).Err()
}

// watchTake is the same bucket made atomic with WATCH/MULTI/EXEC: the write
// aborts when another client changed the key after the read, and the caller
// must read and decide again.
func watchTake(ctx context.Context, c *redis.Client, key string, aborts *atomic.Int64) (bool, error) {
	for {
		var admitted bool
		err := c.Watch(ctx, func(tx *redis.Tx) error {
			tokens, err := tx.Get(ctx, key).Int64()
			if errors.Is(err, redis.Nil) {
				tokens, err = quota, nil
			}
			if err != nil || tokens < 1 {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, key, tokens-1, time.Minute)
				return nil
			})
			admitted = err == nil
			return err
		}, key)
		if errors.Is(err, redis.TxFailedErr) {
			aborts.Add(1)
			continue
		}
		return admitted, err
	}
}

// TestClientSideBucketsRaceOrRetry keeps the two designs the scripts replace
// and measures them under the same load as the exact-quota tests: GET then
// SET over-admits, WATCH/MULTI/EXEC is exact but aborts and retries.
func TestClientSideBucketsRaceOrRetry(t *testing.T) {
	srv := redistest.Single(t)
	prefix := redistest.KeyPrefix(t)
	var cs []*redis.Client
	for range clients {
		cs = append(cs, srv.Client(t))
	}
	ctx := context.Background()

	admitted := redistest.Hammer(t, clients, callers, callsEach, func(i int) (bool, error) {
		return getThenSetTake(ctx, cs[i], prefix+"get-set")
	})
	t.Logf("GET then SET: %d of %d calls admitted for a quota of %d", admitted, callers*callsEach, quota)
	if admitted <= quota {
		t.Errorf("GET then SET admitted %d, want more than the quota %d: the check-then-act race did not show", admitted, quota)
	}

	var aborts atomic.Int64
	admitted = redistest.Hammer(t, clients, callers, callsEach, func(i int) (bool, error) {
		return watchTake(ctx, cs[i], prefix+"watch", &aborts)
	})
	t.Logf("WATCH/MULTI/EXEC: %d of %d calls admitted for a quota of %d, after %d aborted transactions",
		admitted, callers*callsEach, quota, aborts.Load())
	if admitted != quota {
		t.Errorf("WATCH/MULTI/EXEC admitted %d, want exactly %d", admitted, quota)
	}
	if aborts.Load() == 0 {
		t.Errorf("WATCH/MULTI/EXEC never aborted under %d concurrent callers", callers)
	}
}
