package region

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// TestThreeRegionsOnRedis runs three regions, each deciding on its own
// redis-server, coordinating through a home on the first region's server,
// asking 10, 50 and as much as they can of a 600/s limit: the shares in
// force never add up to more than the limit, the regions together never
// admit more than it allows, and once the new home has settled (a lease
// from the first report) the busy region gets what the others leave.
func TestThreeRegionsOnRedis(t *testing.T) {
	servers := []*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
	var stores []tollgate.Store
	for _, s := range servers {
		stores = append(stores, newRedis(t, s.Client(t)))
	}
	homeClient := redis.NewClient(servers[0].Options())
	t.Cleanup(func() { _ = homeClient.Close() })
	home, err := NewRedisHome(homeClient, "")
	if err != nil {
		t.Fatal(err)
	}
	limit := tollgate.PerSecond(600)
	const interval = 200 * time.Millisecond
	w := newWorld(t, home, stores, Config{Limits: []tollgate.Limit{limit}, Rebalance: interval})
	start, lag := time.Now(), startLagProbe(t)
	w.drive(0, "tenant", limit, 1, 100*time.Millisecond, nil)
	w.drive(1, "tenant", limit, 1, 20*time.Millisecond, nil)
	for range 4 {
		w.drive(2, "tenant", limit, 1, 0, nil)
	}
	redistest.Elapse(4 * time.Second) // the regions run for 4s
	w.halt()
	from, to := start.Add(2*interval+3*interval), start.Add(4*time.Second) // the lease is 3 intervals
	secs := to.Sub(from).Seconds()
	var got [3]float64
	for i := range got {
		got[i] = float64(w.between(i, from, to)) / secs
	}
	t.Logf("admitted %.1f, %.1f and %.1f per second", got[0], got[1], got[2])
	if total, want := got[0]+got[1]+got[2], lag.floor(t, 0.95); total < want*600 {
		t.Errorf("admitted %.0f/s together, want at least %.0f%% of 600", total, 100*want)
	}
	if want := lag.floor(t, 0.9); got[2] < want*540 {
		t.Errorf("the busy region admitted %.0f/s, want at least %.0f%% of its fair share 540", got[2], 100*want)
	}
	w.checkShares("tenant", limit, start, to)
	w.checkEnvelope(limit, w.slack(4*time.Second, interval), 100*time.Millisecond, time.Second)
}
