package engine_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/storefixture"
	"github.com/tollgate/tollgate/keyfunc"
)

// BenchmarkBeginRefused is one refused call through the engine alone, on
// the Memory store over 10,000 tenants that spent their quota: the cost of
// a refusal, counting of the refused identity included
// (docs/performance.md#who-is-refused).
func BenchmarkBeginRefused(b *testing.B) {
	l, err := engine.New(storefixture.Memory(b), engine.Config{Rules: []engine.Rule{{
		Name: "per-tenant", Key: keyfunc.Metadata("x-tenant"), Limits: engine.Fixed(tollgate.PerHour(1)),
	}}})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close(context.Background())
	headers := make([]keyfunc.Header, 10_000)
	ctx := context.Background()
	for i := range headers {
		headers[i] = keyfunc.HTTPHeader(http.Header{"X-Tenant": {"tenant-" + strconv.Itoa(i)}})
		if v := l.Begin(ctx, engine.Call{Method: "GET /say", Header: headers[i]}); v.Err() == nil {
			v.End(nil, nil)
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		v := l.Begin(ctx, engine.Call{Method: "GET /say", Header: headers[i%len(headers)], Peer: keyfunc.Addr("192.0.2.1:5000")})
		if v.Err() == nil {
			b.Fatal("admitted")
		}
	}
}
