package keyfunc_test

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/keyfunc"
)

// Join limits per tenant and method: each part is length-prefixed, so no
// pair of values can spell another pair.
func ExampleJoin() {
	perTenantAndMethod := keyfunc.Join(keyfunc.Metadata("x-tenant"), keyfunc.Method())

	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "acme"))
	key, err := perTenantAndMethod(ctx, "/shop.Orders/Create")
	fmt.Println(key, err)

	// Without the header there is no identity: the rule refuses the call
	// (or, with ShareMissing, puts it in one anonymous bucket).
	_, err = perTenantAndMethod(context.Background(), "/shop.Orders/Create")
	fmt.Println(errors.Is(err, keyfunc.ErrMissing))
	// Output:
	// 4:acme19:/shop.Orders/Create <nil>
	// true
}

// FirstOf takes the first value present and prefixes its position, so a
// header can never pass for a peer address.
func ExampleFirstOf() {
	tenantOrGlobal := keyfunc.FirstOf(keyfunc.Metadata("x-tenant"), keyfunc.Constant("anonymous"))

	withTenant := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "acme"))
	a, _ := tenantOrGlobal(withTenant, "/shop.Orders/Create")
	b, _ := tenantOrGlobal(context.Background(), "/shop.Orders/Create")
	fmt.Println(a)
	fmt.Println(b)
	// Output:
	// 0:acme
	// 1:anonymous
}
