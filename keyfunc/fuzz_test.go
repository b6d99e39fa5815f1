package keyfunc_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/keyfunc"
)

// FuzzMetadata feeds arbitrary header values, repeated, to Metadata and
// checks the package policy: the first value counts; an empty first value is
// missing; an oversized one is invalid (never missing); a value is never ""
// with a nil error.
func FuzzMetadata(f *testing.F) {
	f.Fuzz(func(t *testing.T, first, second string) {
		md := map[string][]string{"x-key": {first, second}}
		call := keyfunc.Call{Method: "/s/m", Header: keyfunc.MetadataHeader(context.Background(), func(_ context.Context, k string) []string { return md[k] })}
		v, err := keyfunc.Metadata("x-key")(context.Background(), call)
		switch {
		case first == "":
			if !errors.Is(err, keyfunc.ErrMissing) || v != "" {
				t.Fatalf("empty first value: (%q, %v), want ErrMissing", v, err)
			}
		case len(first) > keyfunc.MaxValueLen:
			if !errors.Is(err, keyfunc.ErrInvalid) || errors.Is(err, keyfunc.ErrMissing) || v != "" {
				t.Fatalf("oversized value: (%.20q, %v), want ErrInvalid only", v, err)
			}
		default:
			if err != nil || v != first {
				t.Fatalf("(%q, %v), want (%q, nil)", v, err, first)
			}
		}
	})
}

// splitJoined decodes a Join value back into its parts, proving the encoding
// is unambiguous: two distinct tuples can never decode from one string.
func splitJoined(s string) ([]string, bool) {
	var parts []string
	for s != "" {
		i := strings.IndexByte(s, ':')
		if i <= 0 {
			return nil, false
		}
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 || n > len(s)-i-1 || strconv.Itoa(n) != s[:i] {
			return nil, false
		}
		parts = append(parts, s[i+1:i+1+n])
		s = s[i+1+n:]
	}
	return parts, true
}

// FuzzJoin checks that Join of three values decodes back to exactly those
// values, that it fails (never returns "") when a part is empty or the result
// would be too long, and that moving bytes between parts changes the value.
func FuzzJoin(f *testing.F) {
	f.Fuzz(func(t *testing.T, a, b, c string) {
		fs := make([]keyfunc.Func, 0, 3)
		for _, s := range []string{a, b, c} {
			fs = append(fs, func(context.Context, keyfunc.Call) (string, error) { return s, nil })
		}
		v, err := keyfunc.Join(fs...)(context.Background(), keyfunc.Call{Method: "/s/m"})
		if a == "" || b == "" || c == "" {
			if err == nil || v != "" {
				t.Fatalf("a part is empty: (%q, %v), want an error", v, err)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, keyfunc.ErrInvalid) || v != "" {
				t.Fatalf("(%q, %v): the only failure for present parts is ErrInvalid", v, err)
			}
			if len(a)+len(b)+len(c) < keyfunc.MaxValueLen-3*5 {
				t.Fatalf("short parts rejected: %v", err)
			}
			return
		}
		if len(v) > keyfunc.MaxValueLen {
			t.Fatalf("joined value is %d bytes", len(v))
		}
		parts, ok := splitJoined(v)
		if !ok || len(parts) != 3 || parts[0] != a || parts[1] != b || parts[2] != c {
			t.Fatalf("Join(%q, %q, %q) = %q decodes to %q", a, b, c, v, parts)
		}
		// Shift the boundary between a and b by one byte: a different tuple
		// must give a different value.
		if len(b) > 1 {
			g := keyfunc.Join(keyfunc.Constant(a+b[:1]), keyfunc.Constant(b[1:]), keyfunc.Constant(c))
			w, err := g(context.Background(), keyfunc.Call{Method: "/s/m"})
			if err == nil && w == v {
				t.Fatalf("(%q,%q,%q) and a shifted tuple both give %q", a, b, c, v)
			}
		}
	})
}
