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
	"github.com/tollgate/tollgate/overload"
)

// BenchmarkBeginOverload is BenchmarkBegin with overload control
// (Config.Overload, its tenant the rule's): what the admission step adds
// to an admitted call, a seat taken and given back, below capacity.
func BenchmarkBeginOverload(b *testing.B) {
	benchmarkOverload(b, false)
}

// BenchmarkBeginRuleOverload is BenchmarkBeginOverload with the rule's own
// limit too (Rule.Overload), which stands in for the server's: one seat a
// call, the rule's.
func BenchmarkBeginRuleOverload(b *testing.B) {
	benchmarkOverload(b, true)
}

func benchmarkOverload(b *testing.B, ruleToo bool) {
	tenant := keyfunc.Metadata("x-tenant")
	rule := engine.Rule{Name: "per-tenant", Key: tenant, Limits: engine.Fixed(tollgate.PerSecond(1_000_000_000))}
	if ruleToo {
		rule.Overload = &overload.Options{Tenant: tenant}
	}
	l, err := engine.New(storefixture.Memory(b), engine.Config{Rules: []engine.Rule{rule}, Overload: &overload.Options{Tenant: tenant}})
	if err != nil {
		b.Fatal(err)
	}
	headers := make([]keyfunc.Header, 10_000)
	for i := range headers {
		headers[i] = keyfunc.HTTPHeader(http.Header{"X-Tenant": {"tenant-" + strconv.Itoa(i)}})
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		v := l.Begin(ctx, engine.Call{Method: "GET /say", Header: headers[i%len(headers)], Peer: keyfunc.Addr("192.0.2.1:5000")})
		if v.Err() != nil {
			b.Fatal(v.Err())
		}
		v.End(nil, nil)
	}
}
