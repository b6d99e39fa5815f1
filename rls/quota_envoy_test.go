package rls_test

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/rls"
)

// envoyScenario is the demand of four data planes over 60 seconds: the
// demands of each plane by second.
type envoyScenario struct {
	name   string
	demand func(sec, plane int) float64
	// lower is the least share of the quota the planes must admit: the
	// quota is the target, but what moves between two reports is only
	// learnt at the next.
	lower float64
}

var envoyScenarios = []envoyScenario{
	{name: "skewed", lower: 0.95, demand: func(_, p int) float64 { return []float64{10, 50, 200, 1000}[p] }},
	{name: "ramping", lower: 0.95, demand: func(sec, p int) float64 {
		// Demand moves from plane 0 to plane 3 over the minute.
		f := float64(sec) / 60
		return []float64{600 * (1 - f), 100, 100, 600 * f}[p]
	}},
	{name: "shifting", lower: 0.85, demand: func(sec, p int) float64 {
		// The busiest plane changes abruptly twice, between reports.
		phase := [][]float64{{1000, 10, 10, 10}, {10, 1000, 300, 10}, {100, 100, 100, 700}}[min(sec/20, 2)]
		return phase[p]
	}},
}

// TestQuotaEnvoyLikeDataPlanes runs four data planes behaving as Envoy's
// rate_limit_quota filter does (a report every 5 seconds, time_elapsed in
// whole seconds, 0 on the first) on two replicas sharing one store, for 60
// seconds on a clock the test moves, with the server re-balancing every
// second: the total admitted is never more than 5% above the 400/s quota,
// and within 5% below it unless demand jumps between planes between
// reports (what moved is only learnt at the next report).
func TestQuotaEnvoyLikeDataPlanes(t *testing.T) {
	for _, b := range quotaBackends(t) {
		for _, sc := range envoyScenarios {
			t.Run(b.name+"/"+sc.name, func(t *testing.T) {
				clock := fakeclock.New(quotaStart)
				reb := &rls.Rebalancer{}
				clients := quotaReplicas(t, b.stores(t, 2, clock), rls.WithQuotaClock(clock.Now), rls.WithRebalancer(reb))
				s := &sim{clock: clock}
				for i := range 4 {
					s.planes = append(s.planes, newPlane(t, clients[i%2], "edge", map[string]string{"api": "envoy-" + sc.name}, sc.demand(0, i)))
				}
				const seconds = 60
				for sec := range seconds {
					for i, p := range s.planes {
						p.demand = sc.demand(sec, i)
					}
					if sec%5 == 0 {
						for _, p := range s.planes {
							p.report(clock.Now())
						}
					} else {
						for reb.Streams() < len(s.planes) {
							time.Sleep(time.Millisecond)
						}
						reb.Tick()
						for _, p := range s.planes {
							p.receive(clock.Now())
						}
					}
					s.advance(time.Second)
				}
				quota := 400.0 * seconds
				total := s.total()
				changes := 0
				for _, p := range s.planes {
					changes += p.assignments
				}
				t.Logf("admitted %.0f in %ds: %+.1f%% of the quota %.0f; %d new buckets; shares at the end:%s", total, seconds, 100*(total/quota-1), quota, changes, s.shares())
				if total > 1.05*quota {
					t.Errorf("admitted %.0f, more than 5%% above the quota %.0f", total, quota)
				}
				if total < sc.lower*quota {
					t.Errorf("admitted %.0f, less than %.0f%% of the quota %.0f", total, 100*sc.lower, quota)
				}
			})
		}
	}
}
