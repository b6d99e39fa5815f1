package rls_test

import (
	"math"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/rls"
)

var quotaStart = time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)

// TestQuotaFairShares: four data planes on two replicas sharing one store,
// offering 10, 50, 200 and 1000 requests/s to one 400/s bucket and
// reporting each second, are assigned token buckets within a tenth of the
// max-min shares 10, 50, 170, 170 after two reports, and admit never more
// than 5% above the quota in all. When the largest leaves, the 200/s one
// is assigned its demand within a few reports after its share expires.
func TestQuotaFairShares(t *testing.T) {
	for _, b := range quotaBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			clock := fakeclock.New(quotaStart)
			clients := quotaReplicas(t, b.stores(t, 2, clock), rls.QuotaOptions{Clock: clock.Now, RebalanceInterval: -1})
			s := &sim{clock: clock}
			for i, d := range []float64{10, 50, 200, 1000} {
				s.planes = append(s.planes, newPlane(t, clients[i%2], "edge", map[string]string{"api": "search"}, d))
			}
			round := func(planes []*plane) {
				s.advance(time.Second)
				for _, p := range planes {
					p.report(clock.Now())
				}
			}
			for _, p := range s.planes {
				p.report(clock.Now())
			}
			seconds := 0
			for range 3 {
				round(s.planes)
				seconds++
			}
			for i, want := range []float64{10, 50, 170, 170} {
				if got := s.planes[i].share(); math.Abs(got-want) > math.Max(1, want/10) {
					t.Errorf("after 3 reports, plane %d (%.0f/s) is assigned %.0f/s, want %.0f within a tenth; all:%s", i, s.planes[i].demand, got, want, s.shares())
				}
			}
			for range 5 {
				round(s.planes)
				seconds++
			}
			t.Logf("shares after 8 reports:%s; admitted %.0f in %ds", s.shares(), s.total(), seconds)

			// The largest leaves: its share is held until it expires
			// (3 report intervals), then goes to the others.
			s.planes[3].leave()
			s.planes[3].demand = 0
			if b.name != "memory" {
				redistest.Elapse(3100 * time.Millisecond) // the store's clock is Redis's
			}
			rest := s.planes[:3]
			got := 0
			for r := 1; r <= 6 && got == 0; r++ {
				round(rest)
				seconds++
				if rest[2].share() >= 200 {
					got = r
				}
			}
			if got == 0 || got > 4 {
				t.Errorf("after the largest left, the 200/s plane is assigned %.0f/s (reports: %d), want 200 within 4 reports", rest[2].share(), got)
			}
			quota := 400.0 * float64(seconds)
			if total := s.total(); total > 1.05*quota {
				t.Errorf("admitted %.0f in %ds, more than 5%% above the quota %.0f", total, seconds, quota)
			}
			t.Logf("the 200/s plane had its demand %d reports after the largest left; admitted %.0f in %ds (quota %.0f)", got, s.total(), seconds, quota)
		})
	}
}

// TestQuotaIdleBurst: a data plane whose report refused nothing is
// assigned a token bucket holding its share plus its part of one fill of
// the limit (the limit split among the data planes), which it spends when
// its demand jumps before its next report; a saturated one holds its share
// only. The bursts beyond the shares never add up to more than the limit.
func TestQuotaIdleBurst(t *testing.T) {
	for _, b := range quotaBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			clock := fakeclock.New(quotaStart)
			clients := quotaReplicas(t, b.stores(t, 2, clock), rls.QuotaOptions{Clock: clock.Now, RebalanceInterval: -1})
			s := &sim{clock: clock}
			for i, d := range []float64{10, 1000} {
				s.planes = append(s.planes, newPlane(t, clients[i%2], "edge", map[string]string{"api": "burst"}, d))
			}
			for _, p := range s.planes {
				p.report(clock.Now())
			}
			for range 4 {
				s.advance(time.Second)
				for _, p := range s.planes {
					p.report(clock.Now())
				}
				extra := 0.0
				for _, p := range s.planes {
					extra += p.capacity - p.rate
				}
				if extra > 400 {
					t.Fatalf("bursts beyond the shares add up to %.0f, more than the limit 400; capacities %.0f %.0f, shares%s", extra, s.planes[0].capacity, s.planes[1].capacity, s.shares())
				}
			}
			idle, busy := s.planes[0], s.planes[1]
			if want := idle.rate + 200; idle.capacity != want {
				t.Errorf("the idle plane (share %.0f/s) holds %.0f tokens at most, want %.0f", idle.rate, idle.capacity, want)
			}
			if busy.capacity != busy.rate {
				t.Errorf("the saturated plane (share %.0f/s) holds %.0f tokens at most, want its share", busy.rate, busy.capacity)
			}
			// The idle plane's demand jumps between reports: its burst is
			// admitted at once.
			before := idle.total
			idle.demand = 1000
			s.advance(time.Second)
			if got, least := idle.total-before, idle.rate+200; got < least {
				t.Errorf("the idle plane admitted %.0f in the second its demand jumped, want at least %.0f (its share and its burst)", got, least)
			}
		})
	}
}
