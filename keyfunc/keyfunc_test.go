package keyfunc_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/tollgate/tollgate/keyfunc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const method = "/pkg.Svc/Do"

// incoming is a call of method carrying the metadata kv, as the gRPC door
// presents one.
func incoming(kv ...string) keyfunc.Call {
	md := map[string][]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		md[kv[i]] = append(md[kv[i]], kv[i+1])
	}
	return keyfunc.Call{Method: method, Header: keyfunc.MetadataHeader(context.Background(), func(_ context.Context, k string) []string { return md[k] })}
}

// bare is a call of method with nothing else.
var bare = keyfunc.Call{Method: method}

// want checks that f yields value v (wantErr nil) or an error wrapping
// wantErr for call.
func want(t *testing.T, call keyfunc.Call, f keyfunc.Func, v string, wantErr error) {
	t.Helper()
	wantCtx(t, context.Background(), call, f, v, wantErr)
}

// wantCtx is want for a call made under ctx.
func wantCtx(t *testing.T, ctx context.Context, call keyfunc.Call, f keyfunc.Func, v string, wantErr error) {
	t.Helper()
	got, err := f(ctx, call)
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
	want(t, bare, f, "", keyfunc.ErrMissing)
	want(t, incoming("x-tenant", ""), f, "", keyfunc.ErrMissing)
	want(t, incoming("x-tenant", strings.Repeat("a", keyfunc.MaxValueLen)), f, strings.Repeat("a", keyfunc.MaxValueLen), nil)
	want(t, incoming("x-tenant", strings.Repeat("a", keyfunc.MaxValueLen+1)), f, "", keyfunc.ErrInvalid)
	if _, err := f(context.Background(), incoming("x-tenant", strings.Repeat("a", keyfunc.MaxValueLen+1))); errors.Is(err, keyfunc.ErrMissing) {
		t.Fatalf("an oversized value must not count as missing: %v", err)
	}
	// Binary-safe: any bytes are an identity.
	want(t, incoming("x-tenant-bin", "\x00{}\xff"), keyfunc.Metadata("x-tenant-bin"), "\x00{}\xff", nil)
}

// Over HTTP (and Connect) the same header reads the same, whatever its
// case, and a "-bin" value arrives as base64, padded or not, which is
// decoded to the bytes gRPC delivers: one identity on every door.
func TestMetadataOverHTTP(t *testing.T) {
	over := func(kv ...string) keyfunc.Call {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return keyfunc.Call{Method: "GET /items/{id}", Header: keyfunc.HTTPHeader(h)}
	}
	f := keyfunc.Metadata("X-Tenant")
	want(t, over("x-tenant", "acme"), f, "acme", nil)
	want(t, over("X-TENANT", "acme", "x-tenant", "other"), f, "acme", nil)
	want(t, over("x-other", "acme"), f, "", keyfunc.ErrMissing)
	bin := keyfunc.Metadata("x-tenant-bin")
	raw := "\x00{}\xff"
	want(t, over("X-Tenant-Bin", base64.StdEncoding.EncodeToString([]byte(raw))), bin, raw, nil)
	want(t, over("X-Tenant-Bin", base64.RawStdEncoding.EncodeToString([]byte(raw+"x"))), bin, raw+"x", nil)
	want(t, over("X-Tenant-Bin", "not base64!"), bin, "", keyfunc.ErrInvalid)
	if vs, err := keyfunc.HTTPHeader(http.Header{"X-Tenant-Bin": {"YWNtZQ"}}).Values("x-tenant-bin"); err != nil || len(vs) != 1 || vs[0] != "acme" {
		t.Errorf("Values = %q, %v; want [acme]", vs, err)
	}
	if vs, err := (keyfunc.Header{}).Values("x-tenant"); vs != nil || err != nil {
		t.Errorf("the zero Header has %q, %v", vs, err)
	}
}

// TestValues: Values reads a key in any case, given in any case, as
// Header.Values does, on HTTP headers and on gRPC metadata.
func TestValues(t *testing.T) {
	md := map[string][]string{"x-request-id": {"r1"}, "x-tenant-bin": {"acme"}}
	grpcMD := keyfunc.MetadataHeader(context.Background(), func(_ context.Context, k string) []string { return md[k] })
	h := http.Header{}
	h.Add("X-REQUEST-ID", "r1")
	h.Add("x-tenant-bin", "YWNtZQ")
	for _, name := range []string{"x-request-id", "X-Request-Id", "X-REQUEST-ID"} {
		for door, hd := range map[string]keyfunc.Header{"metadata": grpcMD, "http": keyfunc.HTTPHeader(h)} {
			if vs, err := keyfunc.Values(name)(hd); err != nil || len(vs) != 1 || vs[0] != "r1" {
				t.Errorf("%s: Values(%q) = %q, %v; want [r1]", door, name, vs, err)
			}
			if vs, err := keyfunc.Values("X-Tenant-Bin")(hd); err != nil || len(vs) != 1 || vs[0] != "acme" {
				t.Errorf("%s: Values(\"X-Tenant-Bin\") = %q, %v; want [acme]", door, vs, err)
			}
		}
	}
	if vs, err := keyfunc.Values("x-tenant")(keyfunc.Header{}); vs != nil || err != nil {
		t.Errorf("the zero Header has %q, %v", vs, err)
	}
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
	v, callErr := f(context.Background(), incoming("x-tenant", "acme"))
	if v != "" || callErr == nil || callErr.Error() != err.Error() || errors.Is(callErr, keyfunc.ErrMissing) || errors.Is(callErr, keyfunc.ErrInvalid) {
		t.Errorf("%s called: %q, %v; want \"\" and Validate's error, wrapping neither ErrMissing nor ErrInvalid", what, v, callErr)
	}
}

func TestMethod(t *testing.T) {
	want(t, bare, keyfunc.Method(), method, nil)
	want(t, keyfunc.Call{Method: "GET /items/{id}"}, keyfunc.Method(), "GET /items/{id}", nil)
	if _, err := keyfunc.Method()(context.Background(), keyfunc.Call{}); !errors.Is(err, keyfunc.ErrMissing) {
		t.Fatalf("empty method: %v, want ErrMissing", err)
	}
}

// withPeer is call with the peer addr.
func withPeer(call keyfunc.Call, addr string) keyfunc.Call {
	call.Peer = keyfunc.Addr(addr)
	return call
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
		want(t, withPeer(bare, addr), f, v, nil)
	}
	tcp := bare
	tcp.Peer = &net.TCPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 1}
	want(t, tcp, f, "198.51.100.7", nil)
	want(t, bare, f, "", keyfunc.ErrMissing)
	want(t, withPeer(bare, ""), f, "", keyfunc.ErrMissing)
}

func TestConstant(t *testing.T) {
	want(t, bare, keyfunc.Constant("global"), "global", nil)
	for _, s := range []string{"", strings.Repeat("x", keyfunc.MaxValueLen+1)} {
		wantMisconfigured(t, fmt.Sprintf("Constant(%.10q…)", s), keyfunc.Constant(s), "keyfunc.Constant: the value is")
	}
}

type stringer struct{ s string }

func (s stringer) String() string { return s.s }

type ctxKey struct{}

func TestIdentityAndContext(t *testing.T) {
	f := keyfunc.Identity()
	wantCtx(t, keyfunc.WithIdentity(context.Background(), "user-42"), bare, f, "user-42", nil)
	wantCtx(t, keyfunc.WithIdentity(context.Background(), ""), bare, f, "", keyfunc.ErrMissing)
	want(t, bare, f, "", keyfunc.ErrMissing)
	// A value under another key is not an identity.
	wantCtx(t, context.WithValue(context.Background(), ctxKey{}, "user-42"), bare, f, "", keyfunc.ErrMissing)

	g := keyfunc.Context(ctxKey{})
	wantCtx(t, context.WithValue(context.Background(), ctxKey{}, "svc-a"), bare, g, "svc-a", nil)
	wantCtx(t, context.WithValue(context.Background(), ctxKey{}, stringer{"svc-b"}), bare, g, "svc-b", nil)
	want(t, bare, g, "", keyfunc.ErrMissing)
	_, err := g(context.WithValue(context.Background(), ctxKey{}, 42), bare)
	if err == nil || errors.Is(err, keyfunc.ErrMissing) || errors.Is(err, keyfunc.ErrInvalid) {
		t.Fatalf("a value of the wrong type must be a configuration error, got %v", err)
	}
}

func TestJoin(t *testing.T) {
	a, b := keyfunc.Metadata("a"), keyfunc.Metadata("b")
	f := keyfunc.Join(a, b)
	v1, err1 := f(context.Background(), incoming("a", "x|y", "b", "z"))
	v2, err2 := f(context.Background(), incoming("a", "x", "b", "y|z"))
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
	want(t, withPeer(incoming("x-tenant", "acme"), "192.0.2.1:1"), f, "0:acme", nil)
	want(t, withPeer(bare, "192.0.2.1:1"), f, "1:192.0.2.1", nil)
	// A header that imitates the peer's address does not share its bucket.
	want(t, withPeer(incoming("x-tenant", "192.0.2.1"), "203.0.113.9:1"), f, "0:192.0.2.1", nil)
	// An oversized header is an error, not a reason to fall back.
	want(t, withPeer(incoming("x-tenant", strings.Repeat("a", keyfunc.MaxValueLen+1)), "192.0.2.1:1"), f, "", keyfunc.ErrInvalid)
	// All missing.
	_, err := f(context.Background(), bare)
	if !errors.Is(err, keyfunc.ErrMissing) || !strings.Contains(err.Error(), "x-tenant") || !strings.Contains(err.Error(), "peer") {
		t.Fatalf("all missing: %v, want ErrMissing naming both sources", err)
	}
	// A configuration error stops the search too.
	g := keyfunc.FirstOf(keyfunc.Context(ctxKey{}), keyfunc.Constant("c"))
	if _, err := g(context.WithValue(context.Background(), ctxKey{}, 3.5), bare); err == nil || errors.Is(err, keyfunc.ErrMissing) {
		t.Fatalf("wrong-typed context value: %v, want a configuration error", err)
	}
}

func TestCheckedEnforcesPolicyOnForeignFuncs(t *testing.T) {
	empty := keyfunc.Func(func(context.Context, keyfunc.Call) (string, error) { return "", nil })
	huge := keyfunc.Func(func(context.Context, keyfunc.Call) (string, error) {
		return strings.Repeat("x", keyfunc.MaxValueLen+1), nil
	})
	boom := errors.New("boom")
	failing := keyfunc.Func(func(context.Context, keyfunc.Call) (string, error) { return "ignored", boom })
	want(t, bare, keyfunc.Checked(empty), "", keyfunc.ErrMissing)
	want(t, bare, keyfunc.Checked(huge), "", keyfunc.ErrInvalid)
	want(t, bare, keyfunc.Checked(failing), "", boom)
	want(t, bare, keyfunc.FirstOf(empty, keyfunc.Constant("g")), "1:g", nil)
	want(t, bare, keyfunc.Join(keyfunc.Constant("g"), empty), "", keyfunc.ErrMissing)
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
	mine := keyfunc.Func(func(context.Context, keyfunc.Call) (string, error) { called = true; return "", errors.New("no") })
	for _, f := range []keyfunc.Func{mine, keyfunc.Join(mine), keyfunc.FirstOf(keyfunc.Method(), mine), keyfunc.Checked(mine)} {
		if err := keyfunc.Validate(f); err != nil || called {
			t.Errorf("Validate of a good Func = %v (called %v), want nil without a call", err, called)
		}
	}
}
