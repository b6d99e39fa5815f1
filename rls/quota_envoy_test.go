package rls_test

import (
	"fmt"
	"os"
	"strconv"
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
	// lower is the least share of the quota (or, when less, of what one
	// token bucket of the quota admits of the demand) the planes must
	// admit: that is the target, but what moves between two reports is
	// only learnt at the next.
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
	{name: "surge", lower: 0.85, demand: func(sec, _ int) float64 {
		// Every plane idles, then all jump at once between reports: the
		// most the bursts of idle planes can add at one time.
		if sec < 32 {
			return 10
		}
		return 1000
	}},
}

// TestQuotaEnvoyLikeDataPlanes runs four data planes behaving as Envoy's
// rate_limit_quota filter does (a report every 5 seconds, time_elapsed in
// whole seconds, 0 on the first) on two replicas sharing one store, for 60
// seconds on a clock the test moves, with the server re-balancing every
// second: the total admitted is never more than 5% above the 400/s quota
// nor above what one token bucket of the quota admits of the same demand,
// and within 5% below the less of the two unless demand jumps between
// planes between reports (what moved is only learnt at the next report).
func TestQuotaEnvoyLikeDataPlanes(t *testing.T) {
	// The design served (idle bursts: one fill of the limit held by the
	// data planes whose reports refuse nothing) beside the one before it
	// (no burst beyond a share), alternating which runs first.
	// TOLLGATE_QUOTA_IDLE_FILLS=f runs f fills instead, to measure more.
	designs := [][]float64{{1, 0}, {0, 1}}
	if v := os.Getenv("TOLLGATE_QUOTA_IDLE_FILLS"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("TOLLGATE_QUOTA_IDLE_FILLS=%q: %v", v, err)
		}
		designs = [][]float64{{f}, {f}}
	}
	run := 0
	for _, b := range quotaBackends(t) {
		for _, sc := range envoyScenarios {
			run++
			for _, f := range designs[run%2] {
				t.Run(fmt.Sprintf("%s/%s/fills=%g", b.name, sc.name, f), func(t *testing.T) {
					clock := fakeclock.New(quotaStart)
					reb := &rls.Rebalancer{}
					clients := quotaReplicas(t, b.stores(t, 2, clock), rls.QuotaOptions{Clock: clock.Now}, rls.WithRebalancer(reb), rls.WithIdleFills(f))
					s := &sim{clock: clock}
					for i := range 4 {
						s.planes = append(s.planes, newPlane(t, clients[i%2], "edge", map[string]string{"api": fmt.Sprintf("envoy-%s-%g", sc.name, f)}, sc.demand(0, i)))
					}
					const seconds = 60
					var perSec []float64 // admitted each second
					// bucket is what one token bucket of the quota (400/s,
					// 400 at most, starting full) admits of the demand.
					bucket, tokens := 0.0, 400.0
					for sec := range seconds {
						demand := 0.0
						for i, p := range s.planes {
							p.demand = sc.demand(sec, i)
							demand += p.demand
						}
						admit := min(demand, tokens+400)
						bucket, tokens = bucket+admit, min(400, tokens+400-admit)
						if sec%5 == 0 {
							for _, p := range s.planes {
								p.report(clock.Now())
							}
						} else {
							reb.AwaitStreams(t, len(s.planes))
							reb.Tick()
							for _, p := range s.planes {
								p.receive(clock.Now())
							}
						}
						before := s.total()
						s.advance(time.Second)
						perSec = append(perSec, s.total()-before)
					}
					quota := 400.0 * seconds
					total := s.total()
					changes := 0
					for _, p := range s.planes {
						changes += p.assignments
					}
					t.Logf("admitted %.0f in %ds: %+.1f%% of the quota %.0f (%+.1f%% of %.0f, one bucket of the quota); most in 1 s %.0f, in 5 s %.0f; %d new buckets; shares at the end:%s",
						total, seconds, 100*(total/quota-1), quota, 100*(total/bucket-1), bucket, maxWindow(perSec, 1), maxWindow(perSec, 5), changes, s.shares())
					if most := min(quota, bucket); total > 1.05*most {
						t.Errorf("admitted %.0f, more than 5%% above %.0f", total, most)
					}
					if least := sc.lower * min(quota, bucket); total < least {
						t.Errorf("admitted %.0f, less than %.0f", total, least)
					}
				})
			}
		}
	}
}

// maxWindow is the most admitted in n consecutive seconds.
func maxWindow(perSec []float64, n int) float64 {
	most := 0.0
	for i := n; i <= len(perSec); i++ {
		sum := 0.0
		for _, a := range perSec[i-n : i] {
			sum += a
		}
		most = max(most, sum)
	}
	return most
}
