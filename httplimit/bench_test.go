package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/internal/storefixture"
	"github.com/tollgate/tollgate/keyfunc"
)

// BenchmarkMiddleware is one admitted request through the middleware on
// the Memory store, without the network: what the middleware adds to a
// handler, over 10,000 tenants.
func BenchmarkMiddleware(b *testing.B) {
	l, err := engine.New(storefixture.Memory(b), engine.Config{Rules: []engine.Rule{{
		Name: "per-tenant", Key: keyfunc.Metadata("x-tenant"), Limits: engine.Fixed(tollgate.Limit{Rate: 1e9, Period: time.Second}),
	}}})
	if err != nil {
		b.Fatal(err)
	}
	mw, err := httplimit.New(l)
	if err != nil {
		b.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	reqs := make([]*http.Request, 10_000)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/say", nil)
		reqs[i].Header.Set("X-Tenant", "tenant-"+strconv.Itoa(i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, reqs[i%len(reqs)])
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}

// BenchmarkMiddlewareMux is BenchmarkMiddleware with a ServeMux behind the
// middleware, as a server routes (the middleware reads the mux's route for
// each request), beside the same mux alone: what the middleware adds to a
// routed request.
func BenchmarkMiddlewareMux(b *testing.B) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /say", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	l, err := engine.New(storefixture.Memory(b), engine.Config{Rules: []engine.Rule{{
		Name: "per-tenant", Key: keyfunc.Metadata("x-tenant"), Limits: engine.Fixed(tollgate.Limit{Rate: 1e9, Period: time.Second}),
	}}})
	if err != nil {
		b.Fatal(err)
	}
	mw, err := httplimit.New(l)
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*http.Request, 10_000)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/say", nil)
		reqs[i].Header.Set("X-Tenant", "tenant-"+strconv.Itoa(i))
	}
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"mux alone", mux}, {"middleware", mw(mux)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				w := httptest.NewRecorder()
				c.h.ServeHTTP(w, reqs[i%len(reqs)])
				if w.Code != http.StatusOK {
					b.Fatal(w.Code)
				}
			}
		})
	}
}
