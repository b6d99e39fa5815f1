package store

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/redistest"
)

// TestBigQuotaExact runs 64 goroutines over four stores (own clients) on
// one identity whose limit admits 100,000 units and gives none back during
// the test (366-day period), for every algorithm, on a single node and on a
// Cluster. Each takes random costs up to 100 while they fit, then single
// units until a unit is denied: the units admitted must add up to exactly
// 100,000, and the last answer must say nothing is left.
func TestBigQuotaExact(t *testing.T) {
	forEachRedis(t, bigQuotaExact)
}

func bigQuotaExact(t *testing.T, c redis.UniversalClient) {
	const units = 100_000
	prefix := redistest.KeyPrefix(t)
	var stores []*Redis
	for _, cc := range clientsLike(t, c, clients) {
		stores = append(stores, newRedis(t, cc, WithPrefix(prefix)))
	}
	ctx := context.Background()
	for _, alg := range algorithms {
		req := tollgate.Request{Key: "big-" + alg.String(), Limit: tollgate.Limit{Algorithm: alg, Rate: units, Period: tollgate.MaxPeriod}}
		var admitted, calls atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), uint64(alg)))
				r := req
				r.Cost = 1 + rng.Int64N(100)
				for {
					d, err := stores[g%len(stores)].Allow(ctx, r)
					calls.Add(1)
					if err != nil {
						errs <- err
						return
					}
					switch {
					case d.Allowed:
						admitted.Add(r.Cost)
						if r.Cost > 1 {
							r.Cost = 1 + rng.Int64N(100)
						}
					case r.Cost > 1:
						r.Cost = 1
					case d.Remaining != 0:
						errs <- fmt.Errorf("a unit denied with %d remaining", d.Remaining)
						return
					default:
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%s: %v", alg, err)
		}
		t.Logf("%s: %d calls admitted %d units", alg, calls.Load(), admitted.Load())
		if admitted.Load() != units {
			t.Errorf("%s: %d units admitted, want exactly %d", alg, admitted.Load(), units)
		}
	}
}

// TestLargeLimitsExact drains limits of the sizes real quotas use on the
// Memory store and checks, against big.Int, what the bucket gives back
// after chosen waits: the units available and the exact wait for a cost.
// The scripts compute the same numbers (lua's differential test).
func TestLargeLimitsExact(t *testing.T) {
	day := 24 * time.Hour
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, l := range []tollgate.Limit{
		{Rate: 100, Period: time.Second, Burst: 200},
		{Rate: 100_000, Period: day},
		{Rate: 1_000_000_000, Period: 30 * day},
		{Rate: 5, Period: 365 * day},
		{Rate: 1_000_000_000_000, Period: day},
		{Rate: tollgate.MaxRate, Period: tollgate.MaxPeriod, Burst: tollgate.MaxRate},
		{Rate: 999_999_999_989, Period: tollgate.MaxPeriod - time.Microsecond, Burst: tollgate.MaxRate - 1},
		{Rate: 7, Period: 100 * 365 * day / 1_000_000_000, Burst: 1_000_000_000},
	} {
		for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA} {
			l.Algorithm = alg
			t.Run(l.String(), func(t *testing.T) {
				if err := l.Validate(); err != nil {
					t.Fatal(err)
				}
				now := start
				m := newMemory(t, WithClock(func() time.Time { return now }))
				ctx := context.Background()
				capacity := l.Capacity()
				p, r := big.NewInt(l.Period.Microseconds()), big.NewInt(l.Rate)
				// earned(w) = ⌊w·Rate/Period⌋, and wait(c) = ⌈c·Period/Rate⌉.
				earned := func(w int64) int64 {
					return new(big.Int).Quo(new(big.Int).Mul(big.NewInt(w), r), p).Int64()
				}
				wait := func(c int64) int64 {
					n := new(big.Int).Mul(big.NewInt(c), p)
					n.Add(n, new(big.Int).Sub(r, big.NewInt(1)))
					return n.Quo(n, r).Int64()
				}
				d, err := m.Allow(ctx, tollgate.Request{Key: "k", Limit: l, Cost: capacity})
				if err != nil || !d.Allowed || d.Remaining != 0 || d.ResetAfter != time.Duration(wait(capacity))*time.Microsecond {
					t.Fatalf("the whole capacity at once: %+v, %v; want admitted, 0 left, reset %dµs", d, err, wait(capacity))
				}
				for _, c := range []int64{1, 2, capacity / 3, capacity} {
					c = max(c, 1)
					d, _ := m.Allow(ctx, tollgate.Request{Key: "k", Limit: l, Cost: c})
					if d.Allowed || d.RetryAfter != time.Duration(wait(c))*time.Microsecond {
						t.Fatalf("cost %d on an empty bucket: %+v, want denied with a retry of exactly %dµs", c, d, wait(c))
					}
				}
				// After the wait for a third of the capacity, exactly the
				// units earned by then are there.
				w := wait(max(capacity/3, 1))
				now = start.Add(time.Duration(w) * time.Microsecond)
				want := min(earned(w), capacity)
				d, _ = m.Allow(ctx, tollgate.Request{Key: "k", Limit: l, Cost: want})
				if !d.Allowed || d.Remaining != 0 {
					t.Fatalf("after %dµs: %+v, want %d units admitted, none left", w, d, want)
				}
				if d, _ := m.Allow(ctx, tollgate.Request{Key: "k", Limit: l, Cost: 1}); d.Allowed {
					t.Fatalf("after %dµs and %d units: one more admitted: %+v", w, want, d)
				}
			})
		}
	}
}

// TestCalendarWalkMemory walks calendar windows across the boundaries that
// calendars get wrong on the Memory store's clock: the end of February in
// a leap year, 31 December to 1 January, Sunday to Monday. At each, a
// limit of 2 is used up just before the boundary, a denial reports the time
// to the boundary as RetryAfter and ResetAfter, and at the boundary the
// whole limit is back with a reset of the whole new window.
func TestCalendarWalkMemory(t *testing.T) {
	date := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }
	for _, tc := range []struct {
		limit          tollgate.Limit
		boundary, next time.Time
	}{
		{tollgate.Monthly(2), date(2024, 3, 1), date(2024, 4, 1)},
		{tollgate.Monthly(2), date(2024, 2, 1), date(2024, 3, 1)},
		{tollgate.Monthly(2), date(2027, 1, 1), date(2027, 2, 1)},
		{tollgate.Daily(2), date(2024, 2, 29), date(2024, 3, 1)},
		{tollgate.Daily(2), date(2024, 3, 1), date(2024, 3, 2)},
		{tollgate.Daily(2), date(2027, 1, 1), date(2027, 1, 2)},
		{tollgate.Yearly(2), date(2027, 1, 1), date(2028, 1, 1)},
		{tollgate.Yearly(2), date(2024, 1, 1), date(2025, 1, 1)},
		{tollgate.Weekly(2), date(2026, 12, 7), date(2026, 12, 14)},
		{tollgate.Weekly(2), date(2027, 1, 4), date(2027, 1, 11)},
	} {
		t.Run(fmt.Sprintf("%s/%s", tc.limit, tc.boundary.Format(time.DateOnly)), func(t *testing.T) {
			before := tc.boundary.Add(-time.Hour)
			now := before
			m := newMemory(t, WithClock(func() time.Time { return now }))
			ctx := context.Background()
			req := tollgate.Request{Key: "k", Limit: tc.limit, Cost: 2}
			if d, err := m.Allow(ctx, req); err != nil || !d.Allowed || d.ResetAfter != time.Hour {
				t.Fatalf("an hour before the boundary: %+v, %v; want admitted, reset in 1h", d, err)
			}
			now = tc.boundary.Add(-time.Microsecond)
			req.Cost = 1
			d, _ := m.Allow(ctx, req)
			if d.Allowed || d.RetryAfter != time.Microsecond || d.ResetAfter != time.Microsecond || d.Remaining != 0 {
				t.Fatalf("1µs before the boundary: %+v, want denied, retry and reset 1µs", d)
			}
			now = tc.boundary
			req.Cost = 2
			d, _ = m.Allow(ctx, req)
			if !d.Allowed || d.ResetAfter != tc.next.Sub(tc.boundary) {
				t.Fatalf("at the boundary: %+v, want the whole limit back, reset %s", d, tc.next.Sub(tc.boundary))
			}
			now = tc.next.Add(-time.Second)
			if d, _ := m.Allow(ctx, req); d.Allowed || d.RetryAfter != time.Second {
				t.Fatalf("a second before the next boundary: %+v, want denied with a retry of 1s", d)
			}
		})
	}
}

// TestCalendarResetMatchesRedisTime checks, on a single node and on a
// Cluster, that a calendar window's reset reported by the script is the
// next boundary computed in Go from Redis's own TIME, read just before and
// just after the decision.
func TestCalendarResetMatchesRedisTime(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		st := newRedis(t, c, WithPrefix(redistest.KeyPrefix(t)))
		ctx := context.Background()
		for _, l := range []tollgate.Limit{tollgate.Daily(1), tollgate.Weekly(1), tollgate.Monthly(1), tollgate.Yearly(1)} {
			key := "cal-" + l.Calendar.String()
			// TIME on the node that holds the key.
			serverTime := func() int64 {
				t.Helper()
				var tm time.Time
				var err error
				if cc, ok := c.(*redis.ClusterClient); ok {
					node, e := cc.MasterForKey(ctx, decisionKeys(st.keys.prefix, l.Algorithm, key, "")[0])
					if e != nil {
						t.Fatal(e)
					}
					tm, err = node.Time(ctx).Result()
				} else {
					tm, err = c.Time(ctx).Result()
				}
				if err != nil {
					t.Fatal(err)
				}
				return tm.UnixMicro()
			}
			for attempt := 0; ; attempt++ {
				before := serverTime()
				d, err := st.Allow(ctx, tollgate.Request{Key: key, Limit: l})
				if err != nil {
					t.Fatal(err)
				}
				after := serverTime()
				_, next := algo.CalendarWindow(l.Calendar, before)
				if _, n := algo.CalendarWindow(l.Calendar, after); n != next {
					if attempt < 3 {
						continue // a boundary passed during the call: try again
					}
					t.Fatalf("%s: a boundary passed during every attempt", l)
				}
				reset := d.ResetAfter.Microseconds()
				if !d.Allowed || reset < next-after || reset > next-before {
					t.Fatalf("%s: %+v; want admitted with a reset between %dµs and %dµs (next boundary %s, TIME %d..%d)",
						l, d, next-after, next-before, time.UnixMicro(next).UTC(), before, after)
				}
				d, err = st.Allow(ctx, tollgate.Request{Key: key, Limit: l})
				if err != nil || d.Allowed || d.RetryAfter != d.ResetAfter || d.RetryAfter.Microseconds() > next-after {
					t.Fatalf("%s: second call %+v, %v; want denied until the boundary", l, d, err)
				}
				break
			}
		}
	})
}

// TestCalendarResetIsTheNextBoundary runs the decide script itself, whose
// reply ends with the server time it decided at (Redis TIME), on a single
// node and on a Cluster: for every calendar, the reset it reports is
// exactly the next boundary after that time, computed in Go, minus it; a
// denial's retry is the same; and the state's TTL ends with the window.
func TestCalendarResetIsTheNextBoundary(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		prefix := redistest.KeyPrefix(t)
		for _, l := range []tollgate.Limit{tollgate.Daily(2), tollgate.Weekly(2), tollgate.Monthly(2), tollgate.Yearly(2)} {
			keys := decisionKeys(prefix, l.Algorithm, "cal-exact-"+l.Calendar.String(), "")
			_, cluster := c.(*redis.ClusterClient)
			keys = append(keys, newLineageKeys(prefix, cluster).of(keys[0]))
			p := algo.ParamsOf(tollgate.Request{Limit: l, Cost: 2})
			for i, want := range []bool{true, false} {
				v, err := plainDecide.Run(ctx, c, keys, "", modeNoID, int64(l.Algorithm), p.Rate, p.Period, p.Capacity, p.Cost).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				now := v[6]
				_, next := algo.CalendarWindow(l.Calendar, now)
				if (v[0] == 1) != want || v[3] != next-now || (!want && v[2] != next-now) {
					t.Fatalf("%s, call %d at %s: reply %v; want allowed %v, reset (and a denial's retry) %dµs, to %s",
						l, i+1, time.UnixMicro(now).UTC().Format(time.RFC3339Nano), v, want, next-now, time.UnixMicro(next).UTC())
				}
				if i == 0 {
					ttl, err := c.PTTL(ctx, keys[0]).Result()
					if err != nil || ttl > time.Duration(next-now)*time.Microsecond+2*time.Millisecond || ttl < time.Duration(next-now)*time.Microsecond-time.Second {
						t.Fatalf("%s: state TTL %s (%v), want the %s left in the window", l, ttl, err, time.Duration(next-now)*time.Microsecond)
					}
				}
			}
		}
	})
}
