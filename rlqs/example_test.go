package rlqs_test

import (
	"context"
	"fmt"
	"net"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/rlqs"
	"github.com/tollgate/tollgate/rls"
	"github.com/tollgate/tollgate/store"
)

// A replica deciding from tollgate-rls's assignment: the quota server
// (here in process, on the Memory store) assigns this only replica the
// whole 2 a second, and the Client decides locally.
func Example() {
	cfg, _ := rls.ParseConfig(rls.File{Name: "services.yaml", Data: []byte(`domain: services
descriptors:
  - key: rule
    value: per-tenant
    descriptors:
      - key: key
        rate_limit: {unit: second, requests_per_unit: 2}
`)})
	st, _ := store.NewMemory()
	srv, _ := rls.NewServer(st, rls.Options{Config: cfg})
	quota, _ := rls.NewQuotaServer(srv, rls.QuotaOptions{})
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	rlqspb.RegisterRateLimitQuotaServiceServer(gs, quota)
	go gs.Serve(lis)
	defer gs.Stop()
	conn, _ := grpc.NewClient("passthrough:///rlqs", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	defer conn.Close()

	c, err := rlqs.New(conn, "services", rlqs.Options{})
	if err != nil {
		panic(err)
	}
	defer c.Close(context.Background())
	// The key package interceptor builds for rule "per-tenant" and the
	// tenant "acme": the bucket {rule: per-tenant, key: acme}.
	req := tollgate.Request{Key: "per-tenant\x00ck:acme", Limit: tollgate.PerSecond(2)}
	for range 3 {
		d, err := c.Allow(context.Background(), req)
		fmt.Println(d.Allowed, err)
	}
	// Output:
	// true <nil>
	// true <nil>
	// false <nil>
}
