package tollgate_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/store"
)

// A Limit says how much is admitted: PerSecond and its siblings build a
// token bucket whose burst is its rate; any algorithm can be spelled out.
// Validate rejects what no store can enforce, with an error that wraps
// ErrInvalidRequest.
func ExampleLimit() {
	perSecond := tollgate.PerSecond(100)
	fmt.Println(perSecond.Algorithm, perSecond.Rate, perSecond.Period, perSecond.Burst)

	smooth := tollgate.Limit{Algorithm: tollgate.GCRA, Rate: 600, Period: time.Minute, Burst: 50}
	fmt.Println(smooth.Validate())

	err := tollgate.Limit{Algorithm: tollgate.SlidingWindow, Rate: 0, Period: time.Second}.Validate()
	fmt.Println(errors.Is(err, tollgate.ErrInvalidRequest))
	// Output:
	// token_bucket 100 1s 100
	// <nil>
	// true
}

// A Store answers a Request with a Decision; Cost asks for several units at
// once, and a denial says exactly how long to wait.
func ExampleStore() {
	st, err := store.NewMemory(store.WithClock(func() time.Time {
		return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}))
	if err != nil {
		log.Fatal(err)
	}
	req := tollgate.Request{Key: "export-jobs", Limit: tollgate.PerHour(10), Cost: 4}
	for range 3 {
		d, err := st.Allow(context.Background(), req)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry after %v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// allowed=true remaining=6 retry after 0s
	// allowed=true remaining=2 retry after 0s
	// allowed=false remaining=2 retry after 12m0s
}
