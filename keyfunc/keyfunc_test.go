package keyfunc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/realip"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/keyfunc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const method = "/pkg.Svc/Do"

func incoming(kv ...string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
}

// want checks that f yields value v (wantErr nil) or an error wrapping wantErr.
func want(t *testing.T, ctx context.Context, f keyfunc.Func, v string, wantErr error) {
	t.Helper()
	got, err := f(ctx, method)
	if wantErr != nil {
		if !errors.Is(err, wantErr) {
			t.Fatalf("got (%q, %v), want an error wrapping %v", got, err, wantErr)
		}
		if got != "" {
			t.Fatalf("got value %q with error %v, want \"\"", got, err)
		}
		return
	}
	if err != nil || got != v {
		t.Fatalf("got (%.40q, %v), want (%.40q, nil)", got, err, v)
	}
}

func TestMetadata(t *testing.T) {
	f := keyfunc.Metadata("X-Tenant")
	want(t, incoming("x-tenant", "acme"), f, "acme", nil)
	// Duplicates: the first value counts.
	want(t, incoming("x-tenant", "acme", "x-tenant", "other"), f, "acme", nil)
	want(t, incoming("x-tenant", "", "x-tenant", "other"), f, "", keyfunc.ErrMissing)
	want(t, incoming("x-other", "acme"), f, "", keyfunc.ErrMissing)
	want(t, context.Background(), f, "", keyfunc.ErrMissing)
	want(t, incoming("x-tenant", ""), f, "", keyfunc.ErrMissing)
	want(t, incoming("x-tenant", strings.Repeat("a", keyfunc.MaxValueLen)), f, strings.Repeat("a", keyfunc.MaxValueLen), nil)
	want(t, incoming("x-tenant", strings.Repeat("a", keyfunc.MaxValueLen+1)), f, "", keyfunc.ErrInvalid)
	if _, err := f(incoming("x-tenant", strings.Repeat("a", keyfunc.MaxValueLen+1)), method); errors.Is(err, keyfunc.ErrMissing) {
		t.Fatalf("an oversized value must not count as missing: %v", err)
	}
	// Binary-safe: any bytes are an identity.
	want(t, incoming("x-tenant-bin", "\x00{}\xff"), keyfunc.Metadata("x-tenant-bin"), "\x00{}\xff", nil)
}

func TestMetadataRejectsBadHeader(t *testing.T) {
	for _, h := range []string{"", "x tenant", "x:tenant", "tenant\n", "ünï"} {
		wantMisconfigured(t, fmt.Sprintf("Metadata(%q)", h), keyfunc.Metadata(h), "keyfunc.Metadata: "+strconv.Quote(h)+" is not a valid gRPC metadata key")
	}
	if err := keyfunc.Validate(keyfunc.Metadata("X-Tenant")); err != nil {
		t.Errorf("Validate(Metadata(X-Tenant)) = %v, want nil", err)
	}
}

// wantMisconfigured checks that f, built by what, is misconfigured: Validate
// reports an error containing msg, and a call fails with the same error,
// which is neither ErrMissing nor ErrInvalid (the server's fault).
func wantMisconfigured(t *testing.T, what string, f keyfunc.Func, msg string) {
	t.Helper()
	err := keyfunc.Validate(f)
	if err == nil || !strings.Contains(err.Error(), msg) {
		t.Errorf("Validate(%s) = %v, want an error containing %q", what, err, msg)
		return
	}
	v, callErr := f(incoming("x-tenant", "acme"), method)
	if v != "" || callErr == nil || callErr.Error() != err.Error() || errors.Is(callErr, keyfunc.ErrMissing) || errors.Is(callErr, keyfunc.ErrInvalid) {
		t.Errorf("%s called: %q, %v; want \"\" and Validate's error, wrapping neither ErrMissing nor ErrInvalid", what, v, callErr)
	}
}

func TestMethod(t *testing.T) {
	want(t, context.Background(), keyfunc.Method(), method, nil)
	if _, err := keyfunc.Method()(context.Background(), ""); !errors.Is(err, keyfunc.ErrMissing) {
		t.Fatalf("empty method: %v, want ErrMissing", err)
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "fake" }
func (a fakeAddr) String() string  { return string(a) }

func withPeer(addr net.Addr) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: addr})
}

func TestPeer(t *testing.T) {
	f := keyfunc.Peer()
	for addr, v := range map[string]string{
		"192.0.2.1:5678":          "192.0.2.1",
		"[2001:db8::1]:443":       "2001:db8::1",
		"[::ffff:192.0.2.1]:5678": "192.0.2.1",
		"bufconn":                 "bufconn",
		"/run/app.sock":           "/run/app.sock",
	} {
		want(t, withPeer(fakeAddr(addr)), f, v, nil)
	}
	want(t, withPeer(&net.TCPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 1}), f, "198.51.100.7", nil)
	want(t, withPeer(fakeAddr("")), f, "", keyfunc.ErrMissing)
	want(t, withPeer(nil), f, "", keyfunc.ErrMissing)
	want(t, context.Background(), f, "", keyfunc.ErrMissing)
}

func TestConstant(t *testing.T) {
	want(t, context.Background(), keyfunc.Constant("global"), "global", nil)
	for _, s := range []string{"", strings.Repeat("x", keyfunc.MaxValueLen+1)} {
		wantMisconfigured(t, fmt.Sprintf("Constant(%.10q…)", s), keyfunc.Constant(s), "keyfunc.Constant: the value is")
	}
}

type stringer struct{ s string }

func (s stringer) String() string { return s.s }

type ctxKey struct{}

func TestIdentityAndContext(t *testing.T) {
	f := keyfunc.Identity()
	want(t, keyfunc.WithIdentity(context.Background(), "user-42"), f, "user-42", nil)
	want(t, keyfunc.WithIdentity(context.Background(), ""), f, "", keyfunc.ErrMissing)
	want(t, context.Background(), f, "", keyfunc.ErrMissing)
	// A value under another key is not an identity.
	want(t, context.WithValue(context.Background(), ctxKey{}, "user-42"), f, "", keyfunc.ErrMissing)

	g := keyfunc.Context(ctxKey{})
	want(t, context.WithValue(context.Background(), ctxKey{}, "svc-a"), g, "svc-a", nil)
	want(t, context.WithValue(context.Background(), ctxKey{}, stringer{"svc-b"}), g, "svc-b", nil)
	want(t, context.Background(), g, "", keyfunc.ErrMissing)
	_, err := g(context.WithValue(context.Background(), ctxKey{}, 42), method)
	if err == nil || errors.Is(err, keyfunc.ErrMissing) || errors.Is(err, keyfunc.ErrInvalid) {
		t.Fatalf("a value of the wrong type must be a configuration error, got %v", err)
	}
}

func TestJoin(t *testing.T) {
	a, b := keyfunc.Metadata("a"), keyfunc.Metadata("b")
	f := keyfunc.Join(a, b)
	v1, err1 := f(incoming("a", "x|y", "b", "z"), method)
	v2, err2 := f(incoming("a", "x", "b", "y|z"), method)
	if err1 != nil || err2 != nil || v1 == v2 {
		t.Fatalf("(x|y, z) → (%q, %v); (x, y|z) → (%q, %v): want two distinct values", v1, err1, v2, err2)
	}
	want(t, incoming("a", "ab", "b", "c"), f, "2:ab1:c", nil)
	want(t, incoming("a", "ab"), f, "", keyfunc.ErrMissing)
	want(t, incoming("a", "ab", "b", strings.Repeat("c", keyfunc.MaxValueLen+1)), f, "", keyfunc.ErrInvalid)
	// Each part fits, the combination does not.
	half := strings.Repeat("h", keyfunc.MaxValueLen/2)
	want(t, incoming("a", half, "b", half), f, "", keyfunc.ErrInvalid)
	want(t, incoming("a", "t"), keyfunc.Join(a, keyfunc.Method()), "1:t11:"+method, nil)
}

func TestFirstOf(t *testing.T) {
	f := keyfunc.FirstOf(keyfunc.Metadata("x-tenant"), keyfunc.Peer())
	ctx := peer.NewContext(incoming("x-tenant", "acme"), &peer.Peer{Addr: fakeAddr("192.0.2.1:1")})
	want(t, ctx, f, "0:acme", nil)
	ctx = withPeer(fakeAddr("192.0.2.1:1"))
	want(t, ctx, f, "1:192.0.2.1", nil)
	// A header that imitates the peer's address does not share its bucket.
	ctx = peer.NewContext(incoming("x-tenant", "192.0.2.1"), &peer.Peer{Addr: fakeAddr("203.0.113.9:1")})
	want(t, ctx, f, "0:192.0.2.1", nil)
	// An oversized header is an error, not a reason to fall back.
	ctx = peer.NewContext(incoming("x-tenant", strings.Repeat("a", keyfunc.MaxValueLen+1)), &peer.Peer{Addr: fakeAddr("192.0.2.1:1")})
	want(t, ctx, f, "", keyfunc.ErrInvalid)
	// All missing.
	_, err := f(context.Background(), method)
	if !errors.Is(err, keyfunc.ErrMissing) || !strings.Contains(err.Error(), "x-tenant") || !strings.Contains(err.Error(), "peer") {
		t.Fatalf("all missing: %v, want ErrMissing naming both sources", err)
	}
	// A configuration error stops the search too.
	g := keyfunc.FirstOf(keyfunc.Context(ctxKey{}), keyfunc.Constant("c"))
	if _, err := g(context.WithValue(context.Background(), ctxKey{}, 3.5), method); err == nil || errors.Is(err, keyfunc.ErrMissing) {
		t.Fatalf("wrong-typed context value: %v, want a configuration error", err)
	}
}

func TestCheckedEnforcesPolicyOnForeignFuncs(t *testing.T) {
	empty := keyfunc.Func(func(context.Context, string) (string, error) { return "", nil })
	huge := keyfunc.Func(func(context.Context, string) (string, error) {
		return strings.Repeat("x", keyfunc.MaxValueLen+1), nil
	})
	boom := errors.New("boom")
	failing := keyfunc.Func(func(context.Context, string) (string, error) { return "ignored", boom })
	want(t, context.Background(), keyfunc.Checked(empty), "", keyfunc.ErrMissing)
	want(t, context.Background(), keyfunc.Checked(huge), "", keyfunc.ErrInvalid)
	want(t, context.Background(), keyfunc.Checked(failing), "", boom)
	want(t, context.Background(), keyfunc.FirstOf(empty, keyfunc.Constant("g")), "1:g", nil)
	want(t, context.Background(), keyfunc.Join(keyfunc.Constant("g"), empty), "", keyfunc.ErrMissing)
}

func TestConstructorsRejectNil(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    keyfunc.Func
		msg  string
	}{
		{"Join()", keyfunc.Join(), "keyfunc.Join: no Func given"},
		{"FirstOf()", keyfunc.FirstOf(), "keyfunc.FirstOf: no Func given"},
		{"Join(nil)", keyfunc.Join(keyfunc.Method(), nil), "keyfunc.Join: Func 1: keyfunc: the Func is nil"},
		{"FirstOf(nil)", keyfunc.FirstOf(nil), "keyfunc.FirstOf: Func 0: keyfunc: the Func is nil"},
		{"Checked(nil)", keyfunc.Checked(nil), "keyfunc.Checked: keyfunc: the Func is nil"},
		{"Context(nil)", keyfunc.Context(nil), "keyfunc.Context: the key is nil"},
		{"Join(bad Metadata)", keyfunc.Join(keyfunc.Method(), keyfunc.Metadata("a b")), `keyfunc.Join: Func 1: keyfunc.Metadata: "a b" is not`},
		{"FirstOf(Join())", keyfunc.FirstOf(keyfunc.Join()), "keyfunc.FirstOf: Func 0: keyfunc.Join: no Func given"},
		{"Misconfigured", keyfunc.Misconfigured(errors.New("mine: bad")), "mine: bad"},
	} {
		wantMisconfigured(t, tc.name, tc.f, tc.msg)
	}
	if err := keyfunc.Validate(nil); err == nil {
		t.Error("Validate(nil) = nil, want an error")
	}
	// A Func written elsewhere is never called by Validate.
	called := false
	mine := keyfunc.Func(func(context.Context, string) (string, error) { called = true; return "", errors.New("no") })
	for _, f := range []keyfunc.Func{mine, keyfunc.Join(mine), keyfunc.FirstOf(keyfunc.Method(), mine), keyfunc.Checked(mine)} {
		if err := keyfunc.Validate(f); err != nil || called {
			t.Errorf("Validate of a good Func = %v (called %v), want nil without a call", err, called)
		}
	}
}

// TestOverRealGRPC runs the key functions inside a server interceptor of a
// real gRPC server on a loopback TCP port, so that metadata and peer come
// from the transport rather than from hand-built contexts.
func TestOverRealGRPC(t *testing.T) {
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
	record := func(ctx context.Context, fullMethod string) {
		var row []string
		for _, f := range []keyfunc.Func{tenantAndMethod, fallback, keyfunc.Peer(), keyfunc.RealIP()} {
			v, err := f(ctx, fullMethod)
			if err != nil {
				v = "error"
			}
			row = append(row, v)
		}
		mu.Lock()
		seen = append(seen, strings.Join(row, " "))
		mu.Unlock()
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(
		realip.UnaryServerInterceptor(trusted, []string{realip.XRealIp}),
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			// An authentication interceptor would verify a token here.
			if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("authorization")) > 0 {
				ctx = keyfunc.WithIdentity(ctx, "user:"+md.Get("authorization")[0])
			}
			record(ctx, info.FullMethod)
			return h(ctx, req)
		},
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
