package keyfunc_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tollgate/tollgate/keyfunc"
)

// Join limits per tenant and method: each part is length-prefixed, so no
// pair of values can spell another pair.
func ExampleJoin() {
	perTenantAndMethod := keyfunc.Join(keyfunc.Metadata("x-tenant"), keyfunc.Method())

	call := keyfunc.Call{Method: "/shop.Orders/Create", Header: keyfunc.HTTPHeader(http.Header{"X-Tenant": {"acme"}})}
	key, err := perTenantAndMethod(context.Background(), call)
	fmt.Println(key, err)

	// Without the header there is no identity: the rule refuses the call
	// (or, with ShareMissing, puts it in one anonymous bucket).
	_, err = perTenantAndMethod(context.Background(), keyfunc.Call{Method: "/shop.Orders/Create"})
	fmt.Println(errors.Is(err, keyfunc.ErrMissing))
	// Output:
	// 4:acme19:/shop.Orders/Create <nil>
	// true
}

// FirstOf takes the first value present and prefixes its position, so a
// header can never pass for a peer address.
func ExampleFirstOf() {
	tenantOrGlobal := keyfunc.FirstOf(keyfunc.Metadata("x-tenant"), keyfunc.Constant("anonymous"))

	withTenant := keyfunc.Call{Method: "/shop.Orders/Create", Header: keyfunc.HTTPHeader(http.Header{"X-Tenant": {"acme"}})}
	a, _ := tenantOrGlobal(context.Background(), withTenant)
	b, _ := tenantOrGlobal(context.Background(), keyfunc.Call{Method: "/shop.Orders/Create"})
	fmt.Println(a)
	fmt.Println(b)
	// Output:
	// 0:acme
	// 1:anonymous
}

// A "-bin" header carries bytes: over gRPC grpc-go decodes them, over HTTP
// and Connect the header holds base64, which Header decodes the same way.
func ExampleHTTPHeader() {
	tenant := keyfunc.Metadata("x-tenant-bin")
	overHTTP := keyfunc.Call{Header: keyfunc.HTTPHeader(http.Header{"X-Tenant-Bin": {"YWNtZQ=="}})}
	md := map[string][]string{"x-tenant-bin": {"acme"}} // as grpc-go delivers it
	overGRPC := keyfunc.Call{Header: keyfunc.MetadataHeader(context.Background(), func(_ context.Context, k string) []string { return md[k] })}
	a, _ := tenant(context.Background(), overHTTP)
	b, _ := tenant(context.Background(), overGRPC)
	fmt.Println(a, b)
	// Output:
	// acme acme
}
