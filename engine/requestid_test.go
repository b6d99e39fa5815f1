package engine

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate"
	argcheck "github.com/tollgate/tollgate/internal/check"
	"github.com/tollgate/tollgate/keyfunc"
)

// headers returns md as each door presents it: gRPC metadata (read as
// metadata.ValueFromIncomingContext reads it: the key as given, else any
// key equal to it in another case), and HTTP (Connect) headers.
func headers(md map[string][]string) map[string]keyfunc.Header {
	h := http.Header{}
	for k, vs := range md {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	return map[string]keyfunc.Header{
		"metadata": keyfunc.MetadataHeader(context.Background(), func(_ context.Context, k string) []string {
			if vs, ok := md[k]; ok {
				return vs
			}
			for mk, vs := range md {
				if strings.EqualFold(mk, k) {
					return vs
				}
			}
			return nil
		}),
		"http": keyfunc.HTTPHeader(h),
	}
}

// The request id is read alike from every door's headers: absent is none,
// one valid id (repeated identically) is the id, anything else is a
// malformed id that names the rule it broke.
func TestRequestID(t *testing.T) {
	long := strings.Repeat("a", tollgate.MaxRequestIDLen)
	pairs := func(kv ...string) map[string][]string {
		md := map[string][]string{}
		for i := 0; i < len(kv); i += 2 {
			md[kv[i]] = append(md[kv[i]], kv[i+1])
		}
		return md
	}
	for _, tc := range []struct {
		name   string
		md     map[string][]string
		header string
		want   string
		bad    bool
	}{
		{name: "absent", md: pairs(), want: ""},
		{name: "other key", md: pairs("x-other", "abc"), want: ""},
		{name: "default header", md: pairs("x-request-id", "abc-123"), want: "abc-123"},
		{name: "custom header", md: pairs("idempotency-key", "k1"), header: "idempotency-key", want: "k1"},
		{name: "header in another case", md: pairs("X-Request-ID", "abc-123"), want: "abc-123"},
		{name: "custom header in another case", md: pairs("IDEMPOTENCY-Key", "k1"), header: "idempotency-key", want: "k1"},
		{name: "repeated in two cases, equal", md: pairs("x-request-id", "a", "X-REQUEST-ID", "a"), want: "a"},
		{name: "empty value", md: pairs("x-request-id", ""), want: ""},
		{name: "longest", md: pairs("x-request-id", long), want: long},
		{name: "repeated, equal", md: pairs("x-request-id", "a", "x-request-id", "a"), want: "a"},
		{name: "repeated, different", md: pairs("x-request-id", "a", "x-request-id", "b"), bad: true},
		{name: "repeated, one empty", md: pairs("x-request-id", "a", "x-request-id", ""), bad: true},
		{name: "too long", md: pairs("x-request-id", long+"a"), bad: true},
		{name: "space", md: pairs("x-request-id", "a b"), bad: true},
		{name: "control byte", md: pairs("x-request-id", "a\x00"), bad: true},
		{name: "DEL", md: pairs("x-request-id", "a\x7f"), bad: true},
		{name: "non-ASCII", md: pairs("x-request-id", "ré"), bad: true},
	} {
		for door, h := range headers(tc.md) {
			t.Run(tc.name+"/"+door, func(t *testing.T) {
				l, err := New(newMemory(t), Config{RequestIDHeader: tc.header, Rules: []Rule{testRule("r")}})
				if err != nil {
					t.Fatal(err)
				}
				got := l.requestID(h)
				if tc.bad {
					if got.err == nil || got.id != "" {
						t.Fatalf("got %+v, want an error", got)
					}
					return
				}
				if got.err != nil || got.id != tc.want {
					t.Fatalf("got %+v, want (%q, nil)", got, tc.want)
				}
			})
		}
	}
	// Errors about the id itself also say which rule it broke.
	l, err := New(newMemory(t), Config{Rules: []Rule{testRule("r")}})
	if err != nil {
		t.Fatal(err)
	}
	got := l.requestID(headers(pairs("x-request-id", "a b"))["http"])
	if !errors.Is(got.err, tollgate.ErrInvalidRequest) || !strings.Contains(got.err.Error(), "0x20") {
		t.Fatalf("space in id: %v, want the validation error", got.err)
	}
}

// FuzzRequestID feeds one or two values of the header and checks the id
// read against the rule: returned unchanged when every value is the same
// and it is a valid request id (argcheck.RequestID); otherwise an error and
// no id.
func FuzzRequestID(f *testing.F) {
	l, err := New(nopStore{}, Config{Rules: []Rule{testRule("r")}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, first, second string, repeat bool) {
		vals := []string{first}
		if repeat {
			vals = append(vals, second)
		}
		got := l.requestID(keyfunc.MetadataHeader(context.Background(), func(context.Context, string) []string { return vals }))
		if first == "" && got.err == nil && got.id == "" {
			return // an empty first value: no id
		}
		ok := (!repeat || first == second) && argcheck.RequestID(first) == nil
		if ok {
			if got.err != nil || got.id != first {
				t.Fatalf("values %q: %+v, want (%q, nil)", vals, got, first)
			}
			return
		}
		if got.err == nil || got.id != "" {
			t.Fatalf("values %q: %+v, want an error", vals, got)
		}
	})
}
