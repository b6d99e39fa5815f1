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

// Before serving, check the store (Ready); once serving, ask who is
// refused most (TopRefused: this replica's counts, or every replica's
// merged through the store).
func ExampleLimiter_TopRefused() {
	st, err := store.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	l, err := engine.New(st, engine.Config{Rules: []engine.Rule{{
		Name:   "per-tenant",
		Key:    keyfunc.Metadata("x-tenant"),
		Limits: engine.Fixed(tollgate.PerHour(1)),
	}}})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Ready(ctx); err != nil {
		log.Fatalf("not serving: %v", err)
	}

	for tenant, calls := range map[string]int{"acme": 5, "globex": 3} {
		for range calls {
			v := l.Begin(ctx, engine.Call{Method: "GET /report", Header: keyfunc.HTTPHeader(http.Header{"X-Tenant": {tenant}})})
			if v.Err() == nil {
				v.End(nil, nil)
			}
		}
	}
	top, err := l.TopRefused(ctx, "per-tenant", 10, true)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range top.Top {
		fmt.Printf("%s refused %d times\n", e.ID, e.Count)
	}
	// Output:
	// acme refused 4 times
	// globex refused 2 times
}
