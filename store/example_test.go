package store_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/store"
)

// A Memory store deciding a token bucket of 2 per minute for one identity:
// the burst is spent, the third request is denied with the exact wait, and
// after that wait it is admitted. The clock is fixed so the output is too.
func ExampleNewMemory() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	st, err := store.NewMemory(store.WithClock(func() time.Time { return now }))
	if err != nil {
		log.Fatal(err)
	}
	req := tollgate.Request{Key: "tenant-a", Limit: tollgate.PerMinute(2)}

	for range 3 {
		d, err := st.Allow(context.Background(), req)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry after %v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	now = now.Add(30 * time.Second)
	d, _ := st.Allow(context.Background(), req)
	fmt.Printf("30s later: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Output:
	// allowed=true remaining=1 retry after 0s
	// allowed=true remaining=0 retry after 0s
	// allowed=false remaining=0 retry after 30s
	// 30s later: allowed=true remaining=0
}

// A retry that carries the request id of a call already admitted is
// answered as a replay, without a second debit.
func ExampleMemory_Allow_requestID() {
	st, err := store.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	req := tollgate.Request{Key: "tenant-a", Limit: tollgate.PerHour(10), RequestID: "0f3a9c"}

	first, _ := st.Allow(context.Background(), req)
	retry, _ := st.Allow(context.Background(), req)
	fmt.Printf("first: remaining=%d replayed=%v\n", first.Remaining, first.Replayed)
	fmt.Printf("retry: remaining=%d replayed=%v\n", retry.Remaining, retry.Replayed)
	// Output:
	// first: remaining=9 replayed=false
	// retry: remaining=9 replayed=true
}
