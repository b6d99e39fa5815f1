package rls_test

import (
	"testing"

	"github.com/tollgate/tollgate/rls"
)

const quotaYAML = `
domain: q
descriptors:
  - key: plan
    quota_mode: true
    rate_limit:
      unit: day
      requests_per_unit: 2
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 2
`

// TestQuotaMode: a quota-mode descriptor over its limit is answered OK
// with its limit and nothing remaining, without a reset, never refuses the
// request, and is named in the dynamic metadata, as envoyproxy/ratelimit
// answers it; WithQuotaMode does it for every descriptor.
func TestQuotaMode(t *testing.T) {
	e := newEnv(t, backends()[0], []string{quotaYAML}, func(o *rls.Options) { o.DynamicMetadata = true })
	for range 2 {
		expect(t, "within quota", e.must(t, "q", 0, d("plan", "p"), d("user", "u")), ok, ok, ok)
	}
	resp := e.must(t, "q", 0, d("plan", "p"), d("user", "v"))
	expect(t, "over quota", resp, ok, ok, ok)
	st := resp.Statuses[0]
	if st.GetCurrentLimit().GetRequestsPerUnit() != 2 || st.LimitRemaining != 0 || st.DurationUntilReset != nil {
		t.Fatalf("over quota: status %v, want the limit, 0 remaining, no reset", st)
	}
	md := resp.GetDynamicMetadata().GetFields()
	if v := md["quotaModeViolations"].GetListValue().GetValues(); len(v) != 1 || v[0].GetNumberValue() != 0 {
		t.Fatalf("metadata %v, want quotaModeViolations [0]", resp.GetDynamicMetadata())
	}
	if !md["quotaModeEnabled"].GetBoolValue() || md["domain"].GetStringValue() != e.prefix+"q" {
		t.Fatalf("metadata %v", resp.GetDynamicMetadata())
	}
	if got := md["descriptors"].GetListValue().GetValues()[1].GetStructValue().GetFields()["entries"].GetListValue().GetValues()[0].GetStringValue(); got != "user=v" {
		t.Fatalf("metadata entries %q, want user=v", got)
	}
	// The user limit is enforced as ever.
	expect(t, "user over", e.must(t, "q", 0, d("user", "u")), over, over)

	g := newEnv(t, backends()[0], []string{quotaYAML}, func(o *rls.Options) { o.QuotaMode = true })
	for range 3 {
		expect(t, "global quota mode", g.must(t, "q", 0, d("user", "w")), ok, ok)
	}
}

// TestCountOverLimitOption: WithCountOverLimit counts every descriptor's
// hits on its own, over the limit or not, as envoyproxy/ratelimit does: a
// refused request's other descriptor is debited, and a refused hit counts.
func TestCountOverLimitOption(t *testing.T) {
	e := newEnv(t, backends()[0], []string{quotaYAML}, func(o *rls.Options) { o.CountOverLimit = true })
	expect(t, "first", e.must(t, "q", 3, d("user", "a")), over, over)
	expect(t, "second", e.must(t, "q", 1, d("user", "a")), over, over) // 3 counted: over for the day
	expect(t, "two descriptors", e.must(t, "q", 1, d("user", "a"), d("user", "b")), over, over, ok)
	if got := e.must(t, "q", 0, withHits(d("user", "b"), 0)).Statuses[0].LimitRemaining; got != 1 {
		t.Fatalf("b has %d left, want 1: its hit counted though the request was refused", got)
	}
}
