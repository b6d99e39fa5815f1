package engine_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// A door of one's own (the gRPC interceptors, package httplimit and the
// connectlimit module are three): present the call, run the handler when
// the Verdict admits it, end the call once it has returned, and answer a
// refusal from its Kind and RetryAfter.
func ExampleLimiter_Begin() {
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC) // a clock that stands still
	st, err := store.NewMemory(store.WithClock(func() time.Time { return now }))
	if err != nil {
		log.Fatal(err)
	}
	l, err := engine.New(st, engine.Config{Rules: []engine.Rule{{
		Name:    "per-tenant",
		Methods: []string{"JOB /nightly-export"},
		Key:     keyfunc.Metadata("x-tenant"),
		Limits:  engine.Fixed(tollgate.PerMinute(2)),
	}}})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close(context.Background())

	header := http.Header{"X-Tenant": {"acme"}}
	for range 3 {
		v := l.Begin(context.Background(), engine.Call{
			Method: "JOB /nightly-export",
			Header: keyfunc.HTTPHeader(header),
			Peer:   keyfunc.Addr("192.0.2.1:5000"),
		})
		if err := v.Err(); err != nil {
			fmt.Printf("%s, retry after %s: %v\n", v.Kind(), v.RetryAfter(), err)
			continue
		}
		func() {
			defer v.EndPanicked()
			// The handler runs with v.Context().
			v.End(nil, nil)
		}()
		for _, ld := range v.Limits() {
			fmt.Printf("admitted: %s has %d left\n", ld.Policy, ld.Decision.Remaining)
		}
	}
	// Output:
	// admitted: per-tenant has 1 left
	// admitted: per-tenant has 0 left
	// denied, retry after 30s: rate limit "per-tenant" exceeded: retry after 30s
}
