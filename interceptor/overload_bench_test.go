package interceptor_test

import (
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/overload"
)

// BenchmarkUnaryAdmitOverload is BenchmarkUnaryAdmit with overload control
// (WithOverload, its tenant the rule's), below capacity.
func BenchmarkUnaryAdmitOverload(b *testing.B) {
	benchmarkAdmitWith(b, []interceptor.Option{interceptor.WithOverload(overload.Options{Tenant: keyfunc.Metadata(tenantHeader)})},
		interceptor.Rule{Name: "per-tenant", Key: keyfunc.Metadata(tenantHeader), Limits: interceptor.Fixed(tollgate.PerSecond(1_000_000))})
}
