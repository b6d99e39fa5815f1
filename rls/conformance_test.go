package rls_test

import (
	"math"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// TestREADMEConformance loads configuration files written after the
// examples of envoyproxy/ratelimit's README (testdata/readme, one per
// example) and checks the answers that README describes for them, on every
// store. Where that project answers each descriptor on its own, a refused
// request here debits none of its descriptors; the steps say where that
// shows.
func TestREADMEConformance(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, readFiles(t, "testdata/readme/*.yaml"))

		t.Run("1 two values of one key, each limited", func(t *testing.T) {
			if n := e.admitted(t, 5, "db_qps", 0, d("db", "accounts")); n != 3 {
				t.Fatalf("accounts: %d of 5 admitted, want 3", n)
			}
			if n := e.admitted(t, 5, "db_qps", 0, d("db", "fallback")); n != 3 {
				t.Fatalf("fallback: %d of 5 admitted, want 3 (its own bucket)", n)
			}
			resp := e.must(t, "db_qps", 0, d("db", "orders"))
			expect(t, "unconfigured value", resp, ok, ok)
			if resp.Statuses[0].CurrentLimit != nil {
				t.Fatalf("unconfigured value has a limit: %v", resp.Statuses[0])
			}
		})

		t.Run("2 nested placeholder and per-value buckets", func(t *testing.T) {
			both := func(to string) *pair { return &pair{d("kind", "promo", "recipient", to), d("recipient", to)} }
			p := both("+15550001")
			for i := range 2 {
				expect(t, "promo "+string(rune('1'+i)), e.must(t, "sms", 0, p.a, p.b), ok, ok, ok)
			}
			resp := e.must(t, "sms", 0, p.a, p.b)
			// The promo limit (2 a day) refuses the third; the recipient
			// limit (4 a day) had room and is not debited.
			expect(t, "third promo", resp, over, over, ok)
			if n := e.admitted(t, 4, "sms", 0, d("recipient", "+15550001")); n != 2 {
				t.Fatalf("plain texts after 2 promos: %d of 4 admitted, want 2 (4 a day, 2 used)", n)
			}
			if n := e.admitted(t, 3, "sms", 0, both("+15550002").a); n != 2 {
				t.Fatalf("another recipient's promos: %d of 3 admitted, want 2", n)
			}
		})

		t.Run("3 most specific value first", func(t *testing.T) {
			if n := e.admitted(t, 7, "edge_ip", 0, d("client_ip", "198.51.100.1")); n != 5 {
				t.Fatalf("ordinary address: %d of 7 admitted, want 5", n)
			}
			resp := e.must(t, "edge_ip", 0, d("client_ip", "203.0.113.9"))
			expect(t, "blocked address", resp, over, over)
			if got := resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit(); got != 0 {
				t.Fatalf("blocked address reports requests_per_unit %d, want 0", got)
			}
		})

		t.Run("4 limits apply at the request's depth only", func(t *testing.T) {
			two := d("tier", "gold", "region", "eu")
			resp := e.must(t, "depth_one", 0, two)
			expect(t, "one-level config, two-entry descriptor", resp, ok, ok)
			if resp.Statuses[0].CurrentLimit != nil {
				t.Fatal("a one-level limit matched a two-entry descriptor")
			}
			if n := e.admitted(t, 9, "depth_two", 0, two); n != 7 {
				t.Fatalf("two-level config: %d of 9 admitted, want 7", n)
			}
		})

		t.Run("5 unlimited", func(t *testing.T) {
			for range 10 {
				resp := e.must(t, "backends", 0, d("directory", "ou=people"))
				expect(t, "unlimited", resp, ok, ok)
				if got := resp.Statuses[0].GetLimitRemaining(); got != math.MaxUint32 {
					t.Fatalf("unlimited remaining %d, want MaxUint32", got)
				}
			}
			if n := e.admitted(t, 5, "backends", 0, d("blobstore", "b1")); n != 3 {
				t.Fatalf("limited neighbour: %d of 5 admitted, want 3", n)
			}
		})

		t.Run("6 shadow mode", func(t *testing.T) {
			for range 6 {
				expect(t, "alice (shadow)", e.must(t, "soft_launch", 0, d("app", "auth", "caller", "alice")), ok, ok)
			}
			if n := e.admitted(t, 6, "soft_launch", 0, d("app", "auth", "caller", "bob")); n != 3 {
				t.Fatalf("bob: %d of 6 admitted, want 3", n)
			}
			// A shadow descriptor over its limit never refuses the request
			// nor blocks its enforced neighbours.
			resp := e.must(t, "soft_launch", 0, d("app", "auth", "caller", "alice"), d("app", "web", "caller", "bob"))
			expect(t, "alice over (shadow) with a fresh bob", resp, ok, ok, ok)
		})

		t.Run("7 replaces", func(t *testing.T) {
			reads := d("route", "reads", "account", "acme")
			search := d("route", "search", "account", "acme")
			// Both match: the replaced limit drops out, the replacing one
			// applies (4), and the replaced one's bucket is untouched.
			for i := range 6 {
				resp := e.must(t, "overrides", 0, reads, search)
				want := ok
				if i >= 4 {
					want = over
				}
				expect(t, "both", resp, want, ok, want)
				if resp.Statuses[0].CurrentLimit != nil {
					t.Fatal("the replaced limit still applies")
				}
			}
			if n := e.admitted(t, 3, "overrides", 0, reads); n != 2 {
				t.Fatalf("reads alone after the replaced calls: %d of 3 admitted, want 2 (untouched)", n)
			}
		})

		t.Run("8 detailed_metric changes no limit", func(t *testing.T) {
			if n := e.admitted(t, 3, "detailed", 0, d("tenant", "small")); n != 2 {
				t.Fatalf("unlisted tenant: %d of 3 admitted, want 2", n)
			}
			if n := e.admitted(t, 3, "detailed", 0, d("tenant", "other")); n != 2 {
				t.Fatalf("another unlisted tenant: %d of 3 admitted, want 2 (its own bucket)", n)
			}
			if n := e.admitted(t, 6, "detailed", 0, d("tenant", "big")); n != 5 {
				t.Fatalf("listed tenant: %d of 6 admitted, want 5", n)
			}
		})

		t.Run("9 wildcards", func(t *testing.T) {
			cases := []struct {
				key, value string
				limited    bool
			}{
				{"prefix", "img1", true}, {"prefix", "img", true}, {"prefix", "imgXYZ", true}, {"prefix", "im", false}, {"prefix", "txt", false},
				{"path", "/v1/42/edit", true}, {"path", "/v1/user-7/edit", true}, {"path", "/v1/42/view", false},
				{"route", "/v2/a/items/9/buy", true}, {"route", "/v2/x/items/y/buy", true}, {"route", "/v2/a/items/9/sell", false},
			}
			for _, c := range cases {
				want := 3
				if c.limited {
					want = 2
				}
				if n := e.admitted(t, 3, "paths", 0, d(c.key, c.value)); n != want {
					t.Fatalf("%s=%s: %d of 3 admitted, want %d", c.key, c.value, n, want)
				}
			}
		})

		t.Run("11 share_threshold", func(t *testing.T) {
			got := e.admitted(t, 2, "shared", 0, d("doc", "docs/a.pdf")) + e.admitted(t, 2, "shared", 0, d("doc", "docs/b.csv"))
			if got != 3 {
				t.Fatalf("shared wildcard: %d of 4 admitted across two values, want 3", got)
			}
			expect(t, "third value", e.must(t, "shared", 0, d("doc", "docs/c.txt")), over, over)
			if n := e.admitted(t, 4, "shared", 0, d("own", "own/a.pdf")); n != 3 {
				t.Fatalf("own/a.pdf: %d of 4, want 3", n)
			}
			if n := e.admitted(t, 4, "shared", 0, d("own", "own/b.pdf")); n != 3 {
				t.Fatalf("own/b.pdf: %d of 4, want 3 (isolated)", n)
			}
		})
	})
}

// pair is the two descriptors Envoy sends for one promotional text.
type pair struct{ a, b *rlv3.RateLimitDescriptor }
