package region

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/redistest"
)

// The home forgetting, on real redis-servers: three regions of two
// processes each share a rate (600/s, burst 60) and a window (600 units
// every 2 s); their demand moves just before the home forgets, so that
// the shares the home loses are not those it will be told of first. In
// every case the shares in force never add up to more than the limit
// (watched every 5 ms), over any span the regions admit at most
// B + R·τ + N·k, and in any window at most its units.

// forgetRun drives the rig, moves the demand at 3 s, calls fault at 3.3 s
// (inside every lease in force: a lease is 1 s), and checks the run at
// 8 s.
func forgetRun(t *testing.T, g *redisRig, fault func()) {
	t.Helper()
	busy, quiet := make(chan struct{}), make(chan struct{})
	start := time.Now()
	g.pace(0, "tenant", rigRate, 1, 1000, busy)
	g.pace(1, "tenant", rigRate, 1, 300, nil)
	g.pace(2, "tenant", rigRate, 1, 50, quiet)
	for i := range 3 {
		g.pace(i, "quota", rigWindow, 1, 150, nil)
	}
	time.Sleep(3 * time.Second)
	close(busy)
	close(quiet)
	g.pace(0, "tenant", rigRate, 1, 50, nil)
	g.pace(2, "tenant", rigRate, 1, 1000, nil)
	time.Sleep(300 * time.Millisecond)
	at := time.Now()
	fault()
	t.Logf("the fault took %s", time.Since(at).Round(time.Millisecond))
	time.Sleep(time.Until(start.Add(8 * time.Second)))
	g.halt()
	end := time.Now()
	admitted, _ := g.logs(rigRate)
	back := admitted.Rate(-1, end.Add(-time.Second), end)
	t.Logf("%s: %.0f/s admitted in the last second", g, back)
	if back < 0.9*600 {
		t.Errorf("admitted %.0f/s in the last second, want the regions back at 90%% of the limit", back)
	}
	g.check(start, end)
}

// TestHomeRestartedEmpty restarts the home's redis-server (no
// persistence: it comes back empty) inside every lease.
func TestHomeRestartedEmpty(t *testing.T) {
	g := newRedisRig(t, 2, rigConfig)
	forgetRun(t, g, func() { g.home.Restart(t) })
}

// TestHomeKilled kills the home (SIGKILL), leaves it down past every
// lease, and starts it again, empty.
func TestHomeKilled(t *testing.T) {
	g := newRedisRig(t, 2, rigConfig)
	forgetRun(t, g, func() {
		g.home.Stop(t)
		time.Sleep(rigConfig.Lease + 300*time.Millisecond)
		g.home.Restart(t)
	})
}

// TestHomeFlushed flushes the home (FLUSHALL) inside every lease.
func TestHomeFlushed(t *testing.T) {
	g := newRedisRig(t, 2, rigConfig)
	c := g.homeClient(t)
	forgetRun(t, g, func() {
		if err := c.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestHomeFailedOver fails the home over to its replica inside every
// lease, losing its last writes: the replica is frozen for 300 ms while
// the primary grants, then the primary is killed and the replica promoted
// in its place (the regions' links turn to it, as an address that fails
// over).
func TestHomeFailedOver(t *testing.T) {
	g := newRedisRig(t, 2, rigConfig)
	replica := redistest.Replica(t, g.home)
	rc := replica.Client(t)
	forgetRun(t, g, func() {
		replica.Freeze(t)
		time.Sleep(300 * time.Millisecond)
		g.home.Stop(t)
		replica.Thaw(t)
		if err := rc.SlaveOf(context.Background(), "NO", "ONE").Err(); err != nil {
			t.Fatal(err)
		}
		for _, l := range g.links {
			l.turn(replica.Addr())
		}
	})
}

// TestLateReports holds up one region's reports for 2 s (a slow link that
// delivers them after the region gave up on them) while its demand
// surges: the reports it made later, for the larger share it took, reach
// the home first; the held ones, for a smaller share, change nothing when
// they arrive.
func TestLateReports(t *testing.T) {
	g := newRedisRig(t, 2, rigConfig)
	quiet := make(chan struct{})
	start := time.Now()
	g.pace(0, "tenant", rigRate, 1, 50, quiet)
	g.pace(1, "tenant", rigRate, 1, 1000, nil)
	g.pace(2, "tenant", rigRate, 1, 1000, nil)
	for i := range 3 {
		g.pace(i, "quota", rigWindow, 1, 150, nil)
	}
	time.Sleep(3 * time.Second)
	g.links[0].setHold(2 * time.Second) // the next reports of r0's processes
	time.Sleep(rigConfig.Rebalance + 50*time.Millisecond)
	close(quiet)
	g.pace(0, "tenant", rigRate, 1, 1000, nil)
	g.links[0].setHold(0)
	time.Sleep(time.Until(start.Add(8 * time.Second)))
	g.halt()
	end := time.Now()
	g.check(start, end)
}
