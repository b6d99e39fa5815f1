package interceptor_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// A front door of one's own (package httplimit and the connectlimit module
// are two): present the call, run the handler when the Verdict admits it,
// end the call once it has returned.
func ExampleLimiter_Begin() {
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC) // a clock that stands still
	st, err := store.NewMemory(store.WithClock(func() time.Time { return now }))
	if err != nil {
		log.Fatal(err)
	}
	l, err := interceptor.New(st, interceptor.WithRules(interceptor.Rule{
		Name:   "per-tenant",
		Key:    keyfunc.Metadata("x-tenant"),
		Limits: interceptor.Fixed(tollgate.PerMinute(2)),
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close(context.Background())

	header := http.Header{"X-Tenant": {"acme"}}
	for range 3 {
		ctx := engine.IncomingContext(context.Background(), header, "192.0.2.1:5000")
		v := l.Begin(ctx, engine.Call{Method: "JOB /nightly-export"})
		if err := v.Err(); err != nil {
			fmt.Println(err)
			continue
		}
		func() {
			defer v.EndPanicked()
			// The handler runs with v.Context().
			v.End(nil, nil)
		}()
		for _, ld := range v.Limits() {
			fmt.Printf("admitted: %s has %d left\n", ld.Rule, ld.Decision.Remaining)
		}
	}
	// Output:
	// admitted: per-tenant has 1 left
	// admitted: per-tenant has 0 left
	// rpc error: code = ResourceExhausted desc = rate limit "per-tenant" exceeded: retry after 30s
}
