package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/region"
	"github.com/tollgate/tollgate/store"
)

// The multi-region targets, three regions on one machine each with its
// own redis-server, the links to the home through toxiproxy (40-80 ms
// one way), rebalancing every 400 ms. docs/multi-region.md has the figures
// and the commands.

const regionsInterval = 400 * time.Millisecond

// regionsSettled is when a new home grants by demand: it settles for a
// lease (three intervals) from the first report (one interval), and the
// regions report once more.
const regionsSettled = 5 * regionsInterval

var perSecond600 = tollgate.PerSecond(600)

// TestRegionsSkewedDemand: 10, 50 and 1,000 calls a second on a 600/s
// limit: from two intervals after the new home settled on, at least 90%
// of the limit admitted (the figure, 97%, is the benchmark's; the floor
// tells a fleet that deals the limit out from one that does not, on a
// loaded machine), each region within 10% of its max-min fair share
// (10, 50, 540), never above the limit.
func TestRegionsSkewedDemand(t *testing.T) {
	g := newRig(t, region.Config{Limits: []tollgate.Limit{perSecond600}, Rebalance: regionsInterval})
	start := time.Now()
	for i, d := range []float64{10, 50, 1000} {
		g.drive(i, "tenant", perSecond600, 1, d, nil)
	}
	time.Sleep(8 * time.Second)
	g.halt()
	t.Logf("while the new home settles (from two intervals to %s): %.0f/s admitted", regionsSettled, g.rate(-1, start.Add(2*regionsInterval), start.Add(regionsSettled)))
	from, to := start.Add(regionsSettled+2*regionsInterval), start.Add(8*time.Second)
	total := g.rate(-1, from, to)
	t.Logf("from two intervals after it on: %.0f/s admitted; us-east %.1f, eu-west %.1f, ap-south %.1f", total, g.rate(0, from, to), g.rate(1, from, to), g.rate(2, from, to))
	if total < 0.90*600 {
		t.Errorf("admitted %.0f/s, want at least 90%% of 600", total)
	}
	for i, fair := range []float64{10, 50, 540} {
		if got := g.rate(i, from, to); got < 0.9*fair || got > 1.1*fair {
			t.Errorf("%s admitted %.1f/s, want within 10%% of its fair share %.0f", g.names[i], got, fair)
		}
	}
	t.Log("worst spans:" + g.checkEnvelope(perSecond600, int64(8*time.Second/regionsInterval), 100*time.Millisecond, time.Second))
}

// TestRegionsDemandMoves: the busiest region (1,000/s) goes quiet while a
// quiet one (10/s) surges to 1,000/s: within two intervals after the move
// is reported (one interval), at least 90% of the limit admitted again.
func TestRegionsDemandMoves(t *testing.T) {
	g := newRig(t, region.Config{Limits: []tollgate.Limit{perSecond600}, Rebalance: regionsInterval})
	busy, quiet := make(chan struct{}), make(chan struct{})
	g.drive(0, "tenant", perSecond600, 1, 1000, busy)
	g.drive(1, "tenant", perSecond600, 1, 10, quiet)
	g.drive(2, "tenant", perSecond600, 1, 50, nil)
	time.Sleep(regionsSettled + 3*time.Second)
	shift := time.Now()
	close(busy)
	close(quiet)
	g.drive(1, "tenant", perSecond600, 1, 1000, nil)
	time.Sleep(4 * time.Second)
	g.halt()
	before := g.rate(-1, shift.Add(-2*time.Second), shift)
	back := shift.Add(3 * regionsInterval)
	after := g.rate(-1, back, back.Add(2*time.Second))
	// The first interval after back, alone: the figure the target is about.
	first := g.rate(-1, back, back.Add(regionsInterval))
	t.Logf("%.0f/s before the move; %.0f/s in the interval from three intervals after it, %.0f/s over the two seconds from then", before, first, after)
	for _, got := range []float64{before, after} {
		if got < 0.90*600 {
			t.Errorf("admitted %.0f/s, want at least 90%% of 600", got)
		}
	}
	t.Log("worst spans:" + g.checkEnvelope(perSecond600, int64((regionsSettled+7*time.Second)/regionsInterval), 100*time.Millisecond, time.Second))
}

// TestRegionsCutOff cuts ap-south's link to the home (3 s; 30 s with
// -regions.long) while every region asks 1,000/s of 600/s: it serves from
// its lease (200/s) until the lease ends, then from its floor (20/s); the
// others keep their shares until then and take its share after; the limit
// holds throughout; within two intervals of the link's return, at least
// 90% of the limit admitted again.
func TestRegionsCutOff(t *testing.T) {
	cutFor := 3 * time.Second
	if *regionsLong {
		cutFor = 30 * time.Second
	}
	const lease = 3 * regionsInterval
	g := newRig(t, region.Config{Limits: []tollgate.Limit{perSecond600}, Rebalance: regionsInterval, Lease: lease})
	for i := range 3 {
		g.drive(i, "tenant", perSecond600, 1, 1000, nil)
	}
	time.Sleep(regionsSettled + 2*time.Second)
	cut := time.Now()
	if err := g.links[2].Cut(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(cutFor)
	restored := time.Now()
	if err := g.links[2].Restore(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	g.halt()

	// Its last renewal was sent at most an interval before the cut.
	leaseEnds := cut.Add(lease - 200*time.Millisecond - regionsInterval) // less the default ClockSkew
	onLease := g.rate(2, cut, leaseEnds)
	onFloor := g.rate(2, cut.Add(lease+regionsInterval), restored)
	othersBefore := g.rate(0, cut, leaseEnds) + g.rate(1, cut, leaseEnds)
	othersAfter := g.rate(0, cut.Add(lease+2*regionsInterval), restored) + g.rate(1, cut.Add(lease+2*regionsInterval), restored)
	back := g.rate(-1, restored.Add(2*regionsInterval), restored.Add(2*regionsInterval+2*time.Second))
	t.Logf("cut for %s: ap-south %.0f/s on its lease, %.0f/s on its floor; the others %.0f/s while its lease lasted, %.0f/s after; %.0f/s from two intervals after the link returned",
		cutFor, onLease, onFloor, othersBefore, othersAfter, back)
	if onLease < 0.9*200 {
		t.Errorf("ap-south admitted %.0f/s on its lease, want its share, about 200/s", onLease)
	}
	if onFloor < 0.85*20 || onFloor > 1.15*20 {
		t.Errorf("ap-south admitted %.0f/s after its lease, want its floor, 20/s", onFloor)
	}
	if othersBefore > 1.05*400 {
		t.Errorf("the others admitted %.0f/s while ap-south's lease lasted, want their own shares, 400/s", othersBefore)
	}
	// The floors below tell a fleet that takes the cut region's share, and
	// gives it back, from one that does not (400/s of 600, two thirds);
	// how much of the limit is used is the benchmark's figure
	// (docs/multi-region.md: 97%), which a loaded machine's load
	// generators and clock lower by a few percent (569/s of 600 seen).
	if othersAfter < 0.90*580 {
		t.Errorf("the others admitted %.0f/s after ap-south's lease ended, want at least 90%% of 580", othersAfter)
	}
	if back < 0.90*600 {
		t.Errorf("admitted %.0f/s after the link returned, want at least 90%% of 600", back)
	}
	t.Log("worst spans:" + g.checkEnvelope(perSecond600, int64((cutFor+regionsSettled+5*time.Second)/regionsInterval), 100*time.Millisecond, time.Second, 10*time.Second))
}

// TestRegionsProcesses runs every region as 1, 2 and 8 processes (each a
// Region with its own clients, the home 40-80 ms away from two regions),
// asking 10, 50 and 1,000 calls a second of 600/s dealt to them in turn:
// from two intervals after the new home settled on, the busiest region
// within 5% of its max-min fair share (540), the others within 10%, at
// least 97% of the limit admitted, never above the limit.
func TestRegionsProcesses(t *testing.T) {
	counts := []int{1, 2, 8}
	if *regionsProcs > 0 {
		counts = []int{*regionsProcs}
	}
	for _, procs := range counts {
		t.Run(fmt.Sprint(procs), func(t *testing.T) {
			g := newRigOf(t, procs, region.Config{Limits: []tollgate.Limit{perSecond600}, Rebalance: regionsInterval})
			start := time.Now()
			for i, d := range []float64{10, 50, 1000} {
				g.drive(i, "tenant", perSecond600, 1, d, nil)
			}
			time.Sleep(8 * time.Second)
			g.halt()
			from, to := start.Add(regionsSettled+2*regionsInterval), start.Add(8*time.Second)
			total := g.rate(-1, from, to)
			t.Logf("%d processes a region, from two intervals after the home settled: %.0f/s admitted (%.1f%%); us-east %.1f, eu-west %.1f, ap-south %.1f (%.1f%% of 540)",
				procs, total, 100*total/600, g.rate(0, from, to), g.rate(1, from, to), g.rate(2, from, to), 100*g.rate(2, from, to)/540)
			if total < 0.97*600 {
				t.Errorf("admitted %.0f/s, want at least 97%% of 600", total)
			}
			for i, fair := range []float64{10, 50, 540} {
				off := 0.10 // as TestRegionsSkewedDemand
				if i == 2 {
					off = 0.05 // the region the target is about: its share is most of the limit
				}
				if got := g.rate(i, from, to); got < (1-off)*fair || got > (1+off)*fair {
					t.Errorf("%s admitted %.1f/s, want within %.0f%% of its fair share %.0f", g.names[i], got, 100*off, fair)
				}
			}
			t.Log("worst spans:" + g.checkEnvelope(perSecond600, int64(8*time.Second/regionsInterval), 100*time.Millisecond, time.Second))
		})
	}
}

// TestRegionsMonthlyQuota: a monthly quota of 10,000,000 units, three
// regions asking 10, 50 and 1,000 requests of 1,000 units a second: used
// up to at least 99.9%, never beyond.
func TestRegionsMonthlyQuota(t *testing.T) {
	quota := tollgate.Monthly(10_000_000)
	g := newRig(t, region.Config{Limits: []tollgate.Limit{quota}, Rebalance: regionsInterval})
	start := time.Now()
	for i, d := range []float64{10, 50, 1000} {
		g.drive(i, "tenant", quota, 1000, d, nil)
	}
	var done time.Duration
	for done = time.Second; done < 30*time.Second; done += time.Second {
		time.Sleep(time.Second)
		if g.units(-1, start, time.Now()) >= quota.Rate-3000 {
			break
		}
	}
	time.Sleep(time.Second)
	g.halt()
	used := g.units(-1, start, time.Now())
	t.Logf("used %d of %d (%.3f%%) in %s: us-east %d, eu-west %d, ap-south %d", used, quota.Rate, 100*float64(used)/float64(quota.Rate), done,
		g.units(0, start, time.Now()), g.units(1, start, time.Now()), g.units(2, start, time.Now()))
	if used > quota.Rate {
		t.Errorf("used %d, more than the quota %d", used, quota.Rate)
	}
	if float64(used) < 0.999*float64(quota.Rate) {
		t.Errorf("used %d, less than 99.9%% of the quota %d", used, quota.Rate)
	}
}

// BenchmarkRegionsLocalLatency: a region's decisions take no cross-region
// round trip. Each iteration is one rep of 2,000 decisions on a
// single-region store (the anchor) and one on the region eu-west (whose
// link to the home is 40-80 ms one way), on the same Redis, alternated;
// it reports the medians of the reps' p99s and their ratio (the target:
// at most 1.2). Seven reps, with nothing else running on the machine:
//
//	go test -run '^$' -bench RegionsLocalLatency -benchtime 7x .
func BenchmarkRegionsLocalLatency(b *testing.B) {
	limit := tollgate.PerSecond(1_000_000) // a floor of 33,333/s: every decision admitted, on Redis
	g := newRig(b, region.Config{Limits: []tollgate.Limit{limit}, Rebalance: regionsInterval})
	plain, err := store.NewRedis(g.locals[1])
	if err != nil {
		b.Fatal(err)
	}
	reps := []struct {
		name string
		do   func(context.Context, string) error
		p99s []time.Duration
	}{
		{name: "single", do: func(ctx context.Context, key string) error {
			return admitted(plain.Allow(ctx, tollgate.Request{Key: key, Limit: limit}))
		}},
		{name: "region", do: func(ctx context.Context, key string) error {
			return admitted(g.regions[1][0].Allow(ctx, tollgate.Request{Key: key, Limit: limit}))
		}},
	}
	lat := make([]time.Duration, 2000)
	for b.Loop() {
		for i := range reps {
			for j := range lat {
				t0 := time.Now()
				if err := reps[i].do(context.Background(), reps[i].name); err != nil {
					b.Fatal(err)
				}
				lat[j] = time.Since(t0)
			}
			slices.Sort(lat)
			reps[i].p99s = append(reps[i].p99s, lat[len(lat)*99/100])
		}
	}
	med := func(ds []time.Duration) time.Duration { ds = slices.Clone(ds); slices.Sort(ds); return ds[len(ds)/2] }
	s, r := med(reps[0].p99s), med(reps[1].p99s)
	b.ReportMetric(float64(s.Microseconds()), "p99-single-µs")
	b.ReportMetric(float64(r.Microseconds()), "p99-region-µs")
	b.ReportMetric(float64(r)/float64(s), "p99-ratio")
	b.ReportMetric(0, "ns/op")
	b.Logf("p99 per decision, medians of %d alternating reps of %d: single-region store %s, region %s (%.2f×); reps %v / %v",
		len(reps[0].p99s), len(lat), s, r, float64(r)/float64(s), reps[0].p99s, reps[1].p99s)
}

// admitted turns a decision that was not admitted into an error.
func admitted(d tollgate.Decision, err error) error {
	if err == nil && !d.Allowed {
		err = errors.New("not admitted")
	}
	return err
}
