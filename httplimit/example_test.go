package httplimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// A route limited per tenant, by the X-Tenant header: two requests a
// minute, then 429 with Retry-After and the RateLimit fields.
func ExampleNew() {
	st, err := store.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := engine.New(st, engine.Config{Rules: []engine.Rule{{
		Name:    "per-tenant",
		Methods: []string{"GET /items/{id}"},
		Key:     keyfunc.Metadata("x-tenant"),
		Limits:  engine.Fixed(tollgate.PerMinute(2)),
	}}})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close(context.Background())
	limit, err := httplimit.New(limiter)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s", r.PathValue("id"))
	})
	srv := httptest.NewServer(limit(mux))
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequest("GET", srv.URL+"/items/7", nil)
		req.Header.Set("X-Tenant", "acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Values("Retry-After"))
	}
	// Output:
	// 200 "per-tenant";q=2;w=60 []
	// 200 "per-tenant";q=2;w=60 []
	// 429 "per-tenant";q=2;w=60 [30]
}
