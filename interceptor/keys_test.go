package interceptor_test

import (
	"bytes"
	"context"
	"os"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/keyfunc"
)

// The key docs/internals.md shows as redis-cli lists it is the one the
// interceptor writes: rule "per-tenant" keyed by x-tenant, caller "acme",
// a token bucket, on a Redis store with the default prefix.
func TestDocumentedRedisKey(t *testing.T) {
	const key = "tollgate:{per-tenant%00ck:acme}:tb"
	doc, err := os.ReadFile("../docs/internals.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, []byte("`"+key+"`")) {
		t.Errorf("docs/internals.md does not show the key %s", key)
	}
	c := redistest.Start(t).Client(t)
	l := newLimiter(t, newRedis(t, c), interceptor.WithRules(interceptor.Rule{
		Name:   "per-tenant",
		Key:    keyfunc.Metadata("x-tenant"),
		Limits: interceptor.Fixed(tollgate.PerSecond(10)),
	}))
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "acme"))
	if _, err := l.UnaryServerInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/shop.Orders/Get"}, ok); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []string{key}) {
		t.Fatalf("Redis holds %q, want only %q", keys, key)
	}
}
