package region

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// redisRig is three regions on real redis-servers, as they are deployed:
// each region its own server, run by procs processes (each a Region with
// its own clients, to the region's server and to the home), every region
// reaching the home, a server of its own, through a link of its own.
type redisRig struct {
	*world
	home   *redistest.Server
	links  []*proxy // region i's link to the home
	prefix string
}

// The tuning of the fault tests: a lease of five intervals, so that a
// fault of the home lands inside leases in force; a clock skew of 300 ms,
// the longest a local decision takes on a loaded test machine (a decision
// that read the clock before a window's end must reach its store before
// the window ends).
var rigConfig = Config{Rebalance: 200 * time.Millisecond, Lease: time.Second, ClockSkew: 300 * time.Millisecond}

// The limits the rig shares: a rate with a small burst, so that the bound
// B + R·τ is tight over a second, and a window of two seconds.
var (
	rigRate   = tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 600, Period: time.Second, Burst: 60}
	rigWindow = tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 600, Period: 2 * time.Second}
)

func newRedisRig(t *testing.T, procs int, c Config) *redisRig {
	t.Helper()
	g := &redisRig{home: redistest.Start(t), prefix: redistest.KeyPrefix(t)}
	var parts [][]part
	for range 3 {
		local := redistest.Start(t)
		link := newProxy(t, g.home.Addr())
		g.links = append(g.links, link)
		var ps []part
		for range procs {
			lc := redis.NewClient(&redis.Options{Addr: local.Addr(), ContextTimeoutEnabled: true})
			hc := redis.NewClient(&redis.Options{Addr: link.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = lc.Close(); _ = hc.Close() })
			home, err := NewRedisHome(hc, g.prefix)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, part{local: newRedis(t, lc), home: home})
		}
		parts = append(parts, ps)
	}
	if len(c.Limits) == 0 {
		c.Limits = []tollgate.Limit{rigRate, rigWindow}
	}
	g.world = newProcesses(t, parts, c)
	return g
}

// homeClient is a client of the home's server, for the test's faults.
func (g *redisRig) homeClient(t *testing.T) *redis.Client {
	return g.home.Client(t)
}

// check holds the run against the bound: the shares in force never above
// the limits, over every span of 100 ms and 1 s at most B + R·τ + N·k of
// the rate, in every window at most its units.
func (g *redisRig) check(start, end time.Time) {
	g.t.Helper()
	g.checkShares("tenant", rigRate, start, end)
	g.checkShares("quota", rigWindow, start, end)
	g.checkEnvelope(rigRate, g.slack(end.Sub(start), rigConfig.Rebalance), 100*time.Millisecond, time.Second)
	g.checkWindows(rigWindow, start, end)
}

// fairShares is the max-min fair split of limit among the rates asked:
// water-filling from the smallest ask.
func fairShares(limit float64, asked []float64) []float64 {
	order := make([]int, len(asked))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(asked[a], asked[b]) })
	out, left := make([]float64, len(asked)), limit
	for k, i := range order {
		out[i] = min(asked[i], left/float64(len(asked)-k))
		left -= out[i]
	}
	return out
}

// String names the rig's regions and processes for the log.
func (g *redisRig) String() string {
	return fmt.Sprintf("%d regions of %d processes", len(g.regions), len(g.regions[0]))
}
