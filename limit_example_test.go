package tollgate_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/store"
)

// A monthly quota resets at 00:00 UTC on the 1st, whatever the month's
// length: a denial on 29 February 2024 says to come back on 1 March.
func ExampleMonthly() {
	now := time.Date(2024, 2, 29, 18, 0, 0, 0, time.UTC)
	st, err := store.NewMemory(store.WithClock(func() time.Time { return now }))
	if err != nil {
		log.Fatal(err)
	}
	req := tollgate.Request{Key: "tenant-7", Limit: tollgate.Monthly(1_000_000), Cost: 1_000_000}

	d, _ := st.Allow(context.Background(), req)
	fmt.Println(req.Limit, d.Allowed, d.Remaining)
	req.Cost = 1
	d, _ = st.Allow(context.Background(), req)
	fmt.Println(d.Allowed, "retry after", d.RetryAfter)
	// Output:
	// monthly 1000000 true 0
	// false retry after 6h0m0s
}

// Limits of any realistic size are exact: 10^12 units a day is 11.57 units
// a microsecond, and a bucket emptied at once has exactly the units of the
// microseconds since.
func ExampleLimit_large() {
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	st, err := store.NewMemory(store.WithClock(func() time.Time { return now }))
	if err != nil {
		log.Fatal(err)
	}
	l := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1_000_000_000_000, Period: 24 * time.Hour}
	d, _ := st.Allow(context.Background(), tollgate.Request{Key: "k", Limit: l, Cost: l.Capacity()})
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	now = now.Add(time.Second)
	d, _ = st.Allow(context.Background(), tollgate.Request{Key: "k", Limit: l, Cost: 11_574_074})
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// true 0 24h0m0s
	// true 0
}
