package rls_test

import (
	"sync"
	"testing"

	"github.com/tollgate/tollgate/rls"
)

// TestHitCounts: each request's hits split as envoyproxy/ratelimit's
// statistics split them: near the limit above ⌊0.8·limit⌋, over it past
// the limit, shadow-mode hits past the limit again as shadow_mode.
func TestHitCounts(t *testing.T) {
	var mu sync.Mutex
	sum := map[string]rls.HitCounts{}
	record := func(h rls.HitCounts) {
		mu.Lock()
		defer mu.Unlock()
		s := sum[h.Key]
		s.Key = h.Key
		s.Total += h.Total
		s.WithinLimit += h.WithinLimit
		s.NearLimit += h.NearLimit
		s.OverLimit += h.OverLimit
		s.ShadowMode += h.ShadowMode
		sum[h.Key] = s
	}
	const conf = `
domain: h
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: watch
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 10}
`
	e := newEnv(t, backends()[0], []string{conf}, func(o *rls.Options) { o.CountOverLimit, o.HitCounts = true, record })
	// 7 (within), 2 (8, 9: one within, one near), 3 (10, 11, 12: one near,
	// two over), 1 (over).
	for _, hits := range []uint32{7, 2, 3, 1} {
		e.must(t, "h", hits, d("user", "u"), d("watch", "w"))
	}
	p := e.prefix + "h"
	want := rls.HitCounts{Key: p + ".user", Total: 13, WithinLimit: 9, NearLimit: 2, OverLimit: 3}
	if got := sum[p+".user"]; got != want {
		t.Fatalf("user: %+v, want %+v", got, want)
	}
	want = rls.HitCounts{Key: p + ".watch", Total: 13, WithinLimit: 9, NearLimit: 2, OverLimit: 3, ShadowMode: 3}
	if got := sum[p+".watch"]; got != want {
		t.Fatalf("watch: %+v, want %+v", got, want)
	}
}
