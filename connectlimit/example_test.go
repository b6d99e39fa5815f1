package connectlimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/connectlimit"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/store"
)

// A connect-go handler limited per tenant, by the x-tenant header: the
// rule names its procedure as a gRPC rule names a method.
func ExampleNew() {
	st, err := store.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := engine.New(st, engine.Config{Rules: []engine.Rule{{
		Name:    "per-tenant",
		Methods: []string{"/tollgate.example.Echo/Say"},
		Key:     keyfunc.Metadata("x-tenant"),
		Limits:  engine.Fixed(tollgate.PerMinute(2)),
	}}})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close(context.Background())
	limit, err := connectlimit.New(limiter)
	if err != nil {
		log.Fatal(err)
	}
	h := connect.NewUnaryHandler("/tollgate.example.Echo/Say",
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			return connect.NewResponse(req.Msg), nil
		}, connect.WithInterceptors(limit))
	srv := httptest.NewServer(h)
	defer srv.Close()

	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+"/tollgate.example.Echo/Say")
	for range 3 {
		req := connect.NewRequest(wrapperspb.String("hi"))
		req.Header().Set("x-tenant", "acme")
		if _, err := client.CallUnary(context.Background(), req); err != nil {
			fmt.Println(connect.CodeOf(err))
			continue
		}
		fmt.Println("admitted")
	}
	// Output:
	// admitted
	// admitted
	// resource_exhausted
}
