package rls_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/keyfunc"
	"github.com/tollgate/tollgate/rls"
)

// decodeKey parses a store key back into its domain and entries, failing on
// anything StoreKey could not have written.
func decodeKey(t *testing.T, key string) (string, []rls.Entry) {
	t.Helper()
	domain, rest, ok := strings.Cut(key, "\x00ck:")
	if !ok {
		t.Fatalf("key %q has no separator", key)
	}
	if rest == "" {
		return domain, nil
	}
	var entries []rls.Entry
	for _, part := range strings.Split(rest, "&") {
		k, v, ok := strings.Cut(part, "=")
		if !ok || strings.Contains(v, "=") {
			t.Fatalf("key %q: entry %q is not key=value", key, part)
		}
		ku, err1 := url.PathUnescape(k)
		vu, err2 := url.PathUnescape(v)
		if err1 != nil || err2 != nil {
			t.Fatalf("key %q: bad escape in %q", key, part)
		}
		entries = append(entries, rls.Entry{Key: ku, Value: vu})
	}
	return domain, entries
}

// FuzzStoreKey: a store key decodes back to exactly its domain and entries,
// so two descriptors never share a key by accident.
func FuzzStoreKey(f *testing.F) {
	f.Add("shop", "tenant", "acme", "path", "/a=b&c")
	f.Add("d", "k=", "v", "", "%3D")
	f.Add("d", "a&b", "~c", "%", "%%")
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string) {
		if strings.Contains(domain, "\x00") {
			return // the configuration refuses such a domain
		}
		want := []rls.Entry{{Key: k1, Value: v1}, {Key: k2, Value: v2}}
		gotDomain, got := decodeKey(t, rls.StoreKey(domain, want...))
		if gotDomain != domain || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("StoreKey(%q, %q) decodes to %q, %q", domain, want, gotDomain, got)
		}
	})
}

// TestDescriptorMatchesStoreKey: the interceptor's key function writes what
// the server writes after the separator.
func TestDescriptorMatchesStoreKey(t *testing.T) {
	md := metadata.Pairs("x-tenant", "a=b&c", "x-plan", "gold%")
	call := keyfunc.Call{Method: "/svc/M", Header: keyfunc.MetadataHeader(context.Background(), func(_ context.Context, k string) []string { return md[k] })}
	f := rls.Descriptor(
		rls.EntryFunc{Key: "tenant", Value: keyfunc.Metadata("x-tenant")},
		rls.EntryFunc{Key: "plan", Value: keyfunc.Metadata("x-plan")},
	)
	got, err := f(context.Background(), call)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimPrefix(rls.StoreKey("shop", rls.Entry{Key: "tenant", Value: "a=b&c"}, rls.Entry{Key: "plan", Value: "gold%"}), "shop\x00ck:")
	if got != want || got != "tenant=a%3Db%26c&plan=gold%25" {
		t.Fatalf("Descriptor gives %q, StoreKey %q", got, want)
	}
	if _, err := f(context.Background(), keyfunc.Call{Method: "/svc/M", Header: keyfunc.MetadataHeader(context.Background(), func(_ context.Context, k string) []string { return metadata.Pairs("x-plan", "p")[k] })}); err == nil {
		t.Fatal("a missing entry gave no error")
	}
}

// A descriptor built from bad entries is misconfigured: keyfunc.Validate
// (and so interceptor.New) reports it, and it never panics.
func TestDescriptorMisconfigured(t *testing.T) {
	for _, tc := range []struct {
		f    keyfunc.Func
		want string
	}{
		{rls.Descriptor(), "rls.Descriptor: no entry given"},
		{rls.Descriptor(rls.EntryFunc{Value: keyfunc.Method()}), "rls.Descriptor: entry 0: the Key is empty"},
		{rls.Descriptor(rls.EntryFunc{Key: "a", Value: keyfunc.Method()}, rls.EntryFunc{Key: "b"}), `rls.Descriptor: entry 1 ("b"): keyfunc: the Func is nil`},
		{rls.Descriptor(rls.EntryFunc{Key: "a", Value: keyfunc.Metadata("A B")}), `rls.Descriptor: entry 0 ("a"): keyfunc.Metadata: "A B" is not`},
	} {
		err := keyfunc.Validate(tc.f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want an error containing %q", err, tc.want)
		}
		if _, callErr := tc.f(context.Background(), keyfunc.Call{Method: "/svc/M"}); callErr == nil || callErr.Error() != err.Error() {
			t.Errorf("a call = %v, want Validate's error", callErr)
		}
	}
}
