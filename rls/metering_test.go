package rls_test

// Hits known after the fact: is_negative_hits gives hits back,
// count_over_limit counts hits past the limit; several limits on one
// descriptor and any period.

import (
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const meteringYAML = `
domain: ai
descriptors:
  - key: tenant
    rate_limit:
      unit: day
      requests_per_unit: 10
  - key: bucket
    rate_limit:
      unit: day
      requests_per_unit: 10
      tollgate: {algorithm: token_bucket}
  - key: tokens
    rate_limit:
      unit: day
      requests_per_unit: 10
      tollgate: {count_over_limit: true}
  - key: both
    rate_limit:
      unit: day
      requests_per_unit: 10
      tollgate:
        limits:
          - {requests_per_unit: 4, period: 48h, algorithm: sliding_window}
  - key: odd
    rate_limit:
      requests_per_unit: 100
      tollgate: {period: 90s}
`

// negative marks desc as giving its hits back.
func negative(desc *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	desc.IsNegativeHits = true
	return desc
}

// remaining is what a hits-0 look at desc reports left.
func (e *env) remaining(t *testing.T, domain string, desc *rlv3.RateLimitDescriptor) uint32 {
	t.Helper()
	resp := e.must(t, domain, 1, withHits(desc, 0))
	return resp.GetStatuses()[0].GetLimitRemaining()
}

// TestNegativeHitsGiveBack: is_negative_hits gives hits back and answers
// OK; a refund never makes more than the limit, on a window or a bucket.
func TestNegativeHitsGiveBack(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, []string{meteringYAML})
		for _, key := range []string{"tenant", "bucket"} {
			expect(t, key+": hits 7", e.must(t, "ai", 7, d(key, "a")), ok, ok)
			resp := e.must(t, "ai", 4, negative(d(key, "a")))
			expect(t, key+": 4 given back", resp, ok, ok)
			if got := e.remaining(t, "ai", d(key, "a")); got < 7 || got > 8 {
				// A bucket's give-back may keep one unit it could have
				// refilled meanwhile.
				t.Fatalf("%s: %d left after 7 debited and 4 given back, want 7", key, got)
			}
			expect(t, key+": 100 given back", e.must(t, "ai", 100, negative(d(key, "a"))), ok, ok)
			if got := e.remaining(t, "ai", d(key, "a")); got != 10 {
				t.Fatalf("%s: %d left after giving back more than was debited, want the limit, 10", key, got)
			}
			if n := e.admitted(t, 12, "ai", 1, d(key, "a")); n != 10 {
				t.Fatalf("%s: %d of 12 admitted after the refunds, want 10: a refund made quota", key, n)
			}
		}
	})
}

// TestCountOverLimit: a descriptor counting over its limit counts every
// hit, answers OVER_LIMIT once the count is past the limit, and stays over
// (a look included) until the debt is paid; refunds pay it.
func TestCountOverLimit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, []string{meteringYAML})
		tokens := func() *rlv3.RateLimitDescriptor { return d("tokens", "a") }
		expect(t, "4 of 10", e.must(t, "ai", 4, tokens()), ok, ok)
		expect(t, "8 of 10", e.must(t, "ai", 4, tokens()), ok, ok)
		resp := e.must(t, "ai", 4, tokens())
		expect(t, "12 of 10: counted, over", resp, over, over)
		if got := resp.Statuses[0].GetLimitRemaining(); got != 0 {
			t.Fatalf("remaining %d past the limit, want 0", got)
		}
		expect(t, "a look in debt", e.must(t, "ai", 1, withHits(tokens(), 0)), over, over)
		expect(t, "30 more", e.must(t, "ai", 30, tokens()), over, over)
		// 42 counted: giving back 33 leaves 9 counted, 1 left.
		expect(t, "33 given back", e.must(t, "ai", 33, negative(tokens())), ok, ok)
		if got := e.remaining(t, "ai", tokens()); got != 1 {
			t.Fatalf("%d left after 42 counted and 33 given back, want 1", got)
		}
		expect(t, "1 more", e.must(t, "ai", 1, tokens()), ok, ok)
		expect(t, "over again", e.must(t, "ai", 1, tokens()), over, over)
	})
}

// TestCountOverLimitForADomain: a file's top-level tollgate block makes
// every descriptor of the domain count over its limit.
func TestCountOverLimitForADomain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, []string{`
domain: llm
tollgate: {count_over_limit: true}
descriptors:
  - key: model
    rate_limit: {unit: day, requests_per_unit: 100}
`})
		expect(t, "150 of 100", e.must(t, "llm", 150, d("model", "m")), over, over)
		expect(t, "a look in debt", e.must(t, "llm", 1, withHits(d("model", "m"), 0)), over, over)
		expect(t, "60 given back", e.must(t, "llm", 60, negative(d("model", "m"))), ok, ok)
		if got := e.remaining(t, "llm", d("model", "m")); got != 10 {
			t.Fatalf("%d left after 150 counted and 60 given back, want 10", got)
		}
	})
}

// TestSeveralLimitsOnADescriptor: a descriptor with two limits is admitted
// while both admit; its status describes the tighter limit, and the one
// that refused.
func TestSeveralLimitsOnADescriptor(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, []string{meteringYAML})
		for i := range 4 {
			resp := e.must(t, "ai", 1, d("both", "a"))
			expect(t, "within both", resp, ok, ok)
			if got, want := resp.Statuses[0].GetLimitRemaining(), uint32(3-i); got != want {
				t.Fatalf("call %d: remaining %d, want %d (the tighter limit)", i+1, got, want)
			}
		}
		resp := e.must(t, "ai", 1, d("both", "a"))
		expect(t, "the sliding window refuses", resp, over, over)
		if cur := resp.Statuses[0].GetCurrentLimit(); cur.GetRequestsPerUnit() != 4 {
			t.Fatalf("a refused status describes %+v, want the limit of 4 that refused", cur)
		}
	})
}

// TestAnyPeriod: a period the units cannot say is reported as so many
// seconds.
func TestAnyPeriod(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, []string{meteringYAML})
		resp := e.must(t, "ai", 1, d("odd", "a"))
		expect(t, "one of 100", resp, ok, ok)
		cur := resp.Statuses[0].GetCurrentLimit()
		if cur.GetUnit() != pb.RateLimitResponse_RateLimit_SECOND || cur.GetUnitMultiplier().GetValue() != 90 || cur.GetRequestsPerUnit() != 100 {
			t.Fatalf("current limit %+v, want 100 per 90 SECOND", cur)
		}
	})
}
