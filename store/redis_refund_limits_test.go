package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// TestRefundLargeAndCalendarLimits runs refunds (settle calls, as refund
// sends them) on limits whose products pass 2^53 and on calendar windows:
// of two debits, the second is given back exactly (the first stays), and a
// refund sent again gives nothing more. The limits refill less than a unit
// per 10ms, so what is left is exact within one unit of refill.
func TestRefundLargeAndCalendarLimits(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		prefix := redistest.KeyPrefix(t)
		st := newRedis(t, c, WithPrefix(prefix))
		big := func(alg tollgate.Algorithm) tollgate.Limit {
			// 10^9 over 366 days: 3.2·10^22 µs·units, far past 2^53.
			return tollgate.Limit{Algorithm: alg, Rate: 1_000_000_000, Period: tollgate.MaxPeriod}
		}
		for _, l := range []tollgate.Limit{
			big(tollgate.TokenBucket), big(tollgate.GCRA), big(tollgate.SlidingWindow), big(tollgate.FixedWindow),
			tollgate.Monthly(tollgate.MaxRate), tollgate.Daily(1_000_000_000), tollgate.Yearly(10),
		} {
			capacity := l.Capacity()
			first, second := capacity*2/5, capacity*3/10
			key := "refund-" + l.String()
			debit := func(cost int64) (*call, []tollgate.Request) {
				t.Helper()
				reqs := []tollgate.Request{{Key: key, Limit: l, Cost: cost}}
				return debitCall(t, st, reqs, decideMode{}), reqs
			}
			left := func() int64 {
				t.Helper()
				d, err := st.Peek(ctx, tollgate.Request{Key: key, Limit: l})
				if err != nil {
					t.Fatal(err)
				}
				return d.Remaining + 1 // Peek judges a cost of 1
			}
			start := time.Now()
			debit(first)
			dc, reqs := debit(second)
			once := sendRefund(t, st, reqs, dc, "x")[0].Remaining
			if again := sendRefund(t, st, reqs, dc, "x")[0].Remaining; again < once {
				t.Fatalf("%s: a refund's re-sent copy answered %d left, the refund %d: want nothing more given back", l, again, once)
			}
			got := left()
			// The refill since the first debit, rounded up: at most one
			// unit for every Period/Rate elapsed.
			slack := int64(0)
			if l.Calendar == tollgate.NoCalendar {
				slack = 1 + int64(time.Since(start))*l.Rate/int64(l.Period)
			}
			if got < capacity-first || got > capacity-first+slack {
				t.Errorf("%s: after debits of %d and %d and the second's refund: %d left, want %d (+%d of refill)",
					l, first, second, got, capacity-first, slack)
			}
		}
	})
}
