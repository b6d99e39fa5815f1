package interceptor_test

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/realip"
	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/examples/echo"
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
	// A deadline no loaded machine reaches: a call the store does not
	// decide in time is admitted by its fail mode and writes no key.
	l := newLimiter(t, newRedis(t, c), interceptor.WithStoreTimeout(10*time.Second), interceptor.WithRules(interceptor.Rule{
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

// TestKeysOverRealGRPC runs key functions as the gRPC door presents calls
// to them, on a real gRPC server on a loopback TCP port, so that metadata
// and peer come from the transport rather than from hand-built calls.
func TestKeysOverRealGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tenantAndMethod := keyfunc.Join(keyfunc.Metadata("x-tenant"), keyfunc.Method())
	fallback := keyfunc.FirstOf(keyfunc.Identity(), keyfunc.Metadata("x-tenant"), keyfunc.Peer())
	var (
		mu   sync.Mutex
		seen []string
	)
	record := func(ctx context.Context, call keyfunc.Call) (string, error) {
		var row []string
		for _, f := range []keyfunc.Func{tenantAndMethod, fallback, keyfunc.Peer(), interceptor.RealIP()} {
			v, err := f(ctx, call)
			if err != nil {
				v = "error"
			}
			row = append(row, v)
		}
		mu.Lock()
		seen = append(seen, strings.Join(row, " "))
		mu.Unlock()
		return "all", nil
	}
	l := newLimiter(t, newMemory(t), interceptor.WithRules(interceptor.Rule{Name: "keys", Key: record, Limits: interceptor.Fixed(tollgate.PerSecond(100))}))
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(
		realip.UnaryServerInterceptor(trusted, []string{realip.XRealIp}),
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			// An authentication interceptor would verify a token here.
			if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("authorization")) > 0 {
				ctx = keyfunc.WithIdentity(ctx, "user:"+md.Get("authorization")[0])
			}
			return h(ctx, req)
		},
		l.UnaryServerInterceptor(),
	))
	echo.Register(s, &echo.Server{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	defer func() {
		s.Stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := echo.NewClient(cc)

	calls := []context.Context{
		metadata.AppendToOutgoingContext(t.Context(), "x-tenant", "acme", "x-tenant", "evil", "x-real-ip", "203.0.113.7"),
		metadata.AppendToOutgoingContext(t.Context(), "authorization", "alice", "x-tenant", "acme"),
		t.Context(),
	}
	for _, ctx := range calls {
		if _, err := c.Say(ctx, wrapperspb.String("hi")); err != nil {
			t.Fatal(err)
		}
	}
	wantRows := []string{
		"4:acme" + strconv.Itoa(len(echo.SayMethod)) + ":" + echo.SayMethod + " 1:acme 127.0.0.1 203.0.113.7",
		"4:acme" + strconv.Itoa(len(echo.SayMethod)) + ":" + echo.SayMethod + " 0:user:alice 127.0.0.1 127.0.0.1",
		"error 2:127.0.0.1 127.0.0.1 127.0.0.1",
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, "\n") != strings.Join(wantRows, "\n") {
		t.Fatalf("server saw\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(wantRows, "\n"))
	}
}
