package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/store"
)

// gcraStep is one call of a differential sequence: wait, then ask for cost.
type gcraStep struct {
	wait time.Duration
	cost int64
	// boundary marks a step on an idle bucket: its remaining is a whole
	// number exactly, which redis_rate's float arithmetic may land a hair
	// below and truncate (3.9999999 → 3), so remaining is not compared.
	boundary bool
}

// gcraTolerance is how far tollgate's and redis_rate's durations may be
// apart beyond the time between the two calls of a step on the Redis clock
// (measured with TIME around them): redis_rate computes in float seconds.
const gcraTolerance = 3 * time.Millisecond

// TestGCRAMatchesRedisRate runs the same Rate, Burst, Period and sequence
// of costs on tollgate's GCRA and on redis_rate, side by side on one Redis,
// and checks that they give the same allowed, remaining, retry-after and
// reset-after. The waits keep every step's fraction of an emission
// interval near a quarter: redis_rate rounds remaining from float seconds
// (lua/gcra.lua says how), tollgate is exact in integer microseconds, so
// the two only differ within a hair of half an interval.
//
// Two documented differences are skipped: redis_rate reports remaining 0
// on every denial, tollgate the units still available, which differ when
// a cost above one is denied.
func TestGCRAMatchesRedisRate(t *testing.T) {
	c := newClient(t)
	rr := redis_rate.NewLimiter(c)
	tg := newRedis(t, c, store.WithPrefix(runPrefix("gcra-diff")), store.WithDenyCache(0))
	cases := []struct {
		name  string
		limit tollgate.Limit
		steps []gcraStep
	}{
		{
			// T = 100ms, burst 5.
			name:  "10/s burst 5",
			limit: tollgate.Limit{Algorithm: tollgate.GCRA, Rate: 10, Period: time.Second, Burst: 5},
			steps: []gcraStep{
				{0, 1, true}, {0, 1, false}, {0, 1, false}, {0, 1, false}, {0, 1, false}, // the burst
				{0, 1, false},                      // denied: 100ms to wait
				{125 * time.Millisecond, 1, false}, // one unit back, a quarter of the next
				{0, 2, false},                      // denied: 175ms to two units
				{300 * time.Millisecond, 2, false}, // 3.25 units: admitted, 1 left
				{0, 3, false},                      // denied
				{time.Second, 5, true},             // full again: the whole burst at once
				{30 * time.Millisecond, 1, false},  // denied: 70ms to wait
			},
		},
		{
			// T = 333.333ms: not a whole number of microseconds.
			name:  "3/s burst 3",
			limit: tollgate.Limit{Algorithm: tollgate.GCRA, Rate: 3, Period: time.Second, Burst: 3},
			steps: []gcraStep{
				{0, 3, true}, {0, 1, false},
				{83 * time.Millisecond, 1, false},  // a quarter back: denied
				{333 * time.Millisecond, 1, false}, // 1.25: admitted
				{0, 1, false},
			},
		},
		{
			// Burst below rate: T = 10ms, burst 4.
			name:  "100/s burst 4",
			limit: tollgate.Limit{Algorithm: tollgate.GCRA, Rate: 100, Period: time.Second, Burst: 4},
			steps: []gcraStep{
				{0, 2, true}, {0, 2, false}, {0, 1, false},
				{22500 * time.Microsecond, 1, false}, // 2.25 back
				{0, 1, false}, {0, 1, false},
			},
		},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rl := RedisRateLimit(tc.limit)
			// A step is only comparable when the two limiters saw nearly
			// the same Redis time and the wait before it was close to the
			// planned one: a busy machine that stretches either moves a
			// step's fraction of an interval off its quarter. Such a run
			// proves nothing either way, so the sequence runs again on
			// fresh keys (at most 25 times); each comparable step is
			// asserted in full.
			slack := tc.limit.Period / time.Duration(tc.limit.Rate) / 8
			for attempt := 1; ; attempt++ {
				key := runPrefix(fmt.Sprintf("%s-%d", t.Name(), attempt))
				skew := runGCRASteps(ctx, t, c, tg, rr, key, tc.limit, rl, tc.steps, slack)
				if skew == "" {
					return
				}
				if attempt == 25 {
					t.Fatalf("no run of the sequence kept its timing within %s in 25 attempts: last %s", slack, skew)
				}
				t.Logf("attempt %d not comparable (%s): running again", attempt, skew)
			}
		})
	}
}

// runGCRASteps runs steps on tollgate and redis_rate under key and asserts
// each step whose timing held: both calls within slack of each other on the
// Redis clock and the wait before it within slack of the planned one. It
// returns why a step's timing did not hold ("" when every step's did), at
// which point the sequence is abandoned.
func runGCRASteps(ctx context.Context, t *testing.T, c redis.UniversalClient, tg *store.Redis, rr *redis_rate.Limiter, key string, limit tollgate.Limit, rl redis_rate.Limit, steps []gcraStep, slack time.Duration) string {
	t.Helper()
	var prev time.Time
	var widest time.Duration
	for i, st := range steps {
		time.Sleep(st.wait)
		before, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !prev.IsZero() && absDiff(before.Sub(prev), st.wait) > slack {
			return fmt.Sprintf("step %d waited %s on the Redis clock for a planned %s", i, before.Sub(prev), st.wait)
		}
		got, err := tg.Allow(ctx, tollgate.Request{Key: key, Limit: limit, Cost: st.cost})
		if err != nil {
			t.Fatal(err)
		}
		want, err := rr.AllowN(ctx, key, rl, int(st.cost))
		if err != nil {
			t.Fatal(err)
		}
		after, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if apart := after.Sub(before); apart > slack {
			return fmt.Sprintf("step %d: the two calls ran within %s on the Redis clock", i, apart)
		}
		prev = after
		t.Logf("step %d, cost %d after %s: tollgate %+v; redis_rate allowed %d remaining %d retry %s reset %s",
			i, st.cost, st.wait, got, want.Allowed, want.Remaining, want.RetryAfter, want.ResetAfter)
		if got.Allowed != (want.Allowed > 0) {
			t.Fatalf("step %d: tollgate allowed %v, redis_rate %v", i, got.Allowed, want.Allowed > 0)
		}
		if !st.boundary && (got.Allowed || st.cost == 1) && got.Remaining != int64(want.Remaining) {
			t.Errorf("step %d: remaining %d, redis_rate %d", i, got.Remaining, want.Remaining)
		}
		// Each limiter's state was set by its own calls, at most apart from
		// the other's on the Redis clock in every step so far: durations
		// may differ by the widest such gap more.
		widest = max(widest, after.Sub(before))
		tolerance := gcraTolerance + widest
		if !got.Allowed && absDiff(got.RetryAfter, want.RetryAfter) > tolerance {
			t.Errorf("step %d: retry after %s, redis_rate %s", i, got.RetryAfter, want.RetryAfter)
		}
		if absDiff(got.ResetAfter, want.ResetAfter) > tolerance {
			t.Errorf("step %d: reset after %s, redis_rate %s", i, got.ResetAfter, want.ResetAfter)
		}
	}
	return ""
}

func absDiff(a, b time.Duration) time.Duration {
	if a > b {
		return a - b
	}
	return b - a
}
