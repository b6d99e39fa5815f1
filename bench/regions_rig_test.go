package bench

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/admitlog"
	"github.com/tollgate/tollgate/region"
	"github.com/tollgate/tollgate/store"
)

// regionsLong runs the multi-region tests at their full lengths (a 30 s
// cut-off) instead of the suite's short ones: go test -run Regions
// -regions.long ./ (from bench/; docs/multi-region.md has the figures).
var regionsLong = flag.Bool("regions.long", false, "run the multi-region tests at full length (30 s cut-off)")

// regionsProcs runs TestRegionsProcesses with that many processes a region
// instead of 1, 2 and 8: go test -run RegionsProcesses -regions.procs 40 .
var regionsProcs = flag.Int("regions.procs", 0, "processes a region in TestRegionsProcesses (0: 1, 2 and 8)")

// Between regions, 40-80 ms one way.
const linkLatency, linkJitter = 60 * time.Millisecond, 20 * time.Millisecond

// rig is three regions on one machine: each decides on its own
// redis-server, run by one or more processes (each a Region with its own
// clients); the home is on the first one's, which the other two reach
// through a Link of 40-80 ms one way.
type rig struct {
	t       testing.TB
	servers []*Server
	locals  []*redis.Client // the first process's client of each region's server
	links   []*Link         // links[i] carries region i's calls to the home; nil for the first
	regions [][]*region.Region
	names   []string

	stop    chan struct{}
	drivers sync.WaitGroup
	log     admitlog.Log
}

// newRig starts the servers, links and regions (one process each) with
// c's tuning; every part is stopped when the test ends.
func newRig(t testing.TB, c region.Config) *rig { return newRigOf(t, 1, c) }

// newRigOf is newRig with procs processes a region.
func newRigOf(t testing.TB, procs int, c region.Config) *rig {
	t.Helper()
	g := &rig{t: t, names: []string{"us-east", "eu-west", "ap-south"}, stop: make(chan struct{})}
	for range g.names {
		s, err := StartRedis()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		g.servers = append(g.servers, s)
	}
	for i := range g.names {
		homeAddr := g.servers[0].Addr
		var link *Link
		if i > 0 {
			var err error
			if link, err = NewLink(homeAddr, linkLatency, linkJitter); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(link.Close)
			homeAddr = link.Addr()
		}
		g.links = append(g.links, link)
		var procsOf []*region.Region
		for p := range procs {
			local := redis.NewClient(&redis.Options{Addr: g.servers[i].Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = local.Close() })
			if p == 0 {
				g.locals = append(g.locals, local)
			}
			// DisableIdentity: a new connection over a far link is then one
			// round trip shorter (no CLIENT SETINFO).
			homeClient := redis.NewClient(&redis.Options{Addr: homeAddr, ContextTimeoutEnabled: true, DisableIdentity: true})
			t.Cleanup(func() { _ = homeClient.Close() })
			home, err := region.NewRedisHome(homeClient, "")
			if err != nil {
				t.Fatal(err)
			}
			// Connected, and the script loaded, before the clock starts: a
			// region that has run a while holds its connection to the home.
			if _, err := home.Look(context.Background(), "warm-up", 0, time.Second); err != nil {
				t.Fatal(err)
			}
			st, err := store.NewRedis(local)
			if err != nil {
				t.Fatal(err)
			}
			c.Region, c.Regions = g.names[i], g.names
			r, err := region.New(st, home, c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := r.Close(context.Background()); err != nil {
					t.Error(err)
				}
			})
			procsOf = append(procsOf, r)
		}
		g.regions = append(g.regions, procsOf)
	}
	return g
}

// drive asks region i for cost units of key under l, perSecond times a
// second, until stop is closed or halt: one stream of requests dealt to
// its processes in turn, as a load balancer would.
func (g *rig) drive(i int, key string, l tollgate.Limit, cost int64, perSecond float64, stop <-chan struct{}) {
	procs := len(g.regions[i])
	for j, r := range g.regions[i] {
		g.drivers.Go(func() {
			start, asked := time.Now(), 0
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-g.stop:
					return
				case <-tick.C:
				}
				due := 0 // the requests of the stream dealt to process j so far
				if n := time.Since(start).Seconds() * perSecond; n >= float64(j) {
					due = int((n-float64(j))/float64(procs)) + 1
				}
				for ; asked < due; asked++ {
					d, err := r.Allow(context.Background(), tollgate.Request{Key: key, Limit: l, Cost: cost})
					if err != nil {
						g.t.Errorf("%s: %v", g.names[i], err)
						return
					}
					if d.Allowed {
						at := d.At // the Redis server's clock when it decided: one clock for the three servers on this machine
						if at.IsZero() {
							at = time.Now()
						}
						g.log.Add(i, at, cost)
					}
				}
			}
		})
	}
}

// halt stops every driver and waits for them.
func (g *rig) halt() {
	close(g.stop)
	g.drivers.Wait()
}

// rate is what region i (-1: every region) admitted per second in
// [from, to).
func (g *rig) rate(i int, from, to time.Time) float64 { return g.log.Rate(i, from, to) }

// units sums what region i (-1: every region) admitted in [from, to).
func (g *rig) units(i int, from, to time.Time) int64 { return g.log.Units(i, from, to) }

// checkEnvelope checks that over every span of each length in spans the
// regions together admitted at most what one token bucket of l admits,
// its burst plus the rate over the span, plus one unit per region per
// rebalance of the run; it returns the worst spans' figures for the log.
func (g *rig) checkEnvelope(l tollgate.Limit, rebalances int64, spans ...time.Duration) string {
	g.t.Helper()
	slack := int64(len(g.regions)) * rebalances
	var out string
	for _, span := range spans {
		s := g.log.Worst(l, span)
		if s.Units > s.Allowed+slack {
			g.t.Errorf("over %s the regions admitted %d (%v by region), more than %s allows (%d) plus one unit per region per rebalance (%d)", span, s.Units, s.ByRegion, l, s.Allowed, slack)
		}
		out += fmt.Sprintf(" %s: %d of %d;", span, s.Units, s.Allowed)
	}
	return out
}
