package region

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/redistest"
)

// The home forgetting, on real redis-servers: three regions of two
// processes each share a rate (600/s, burst 60) and a window (600 units
// every 2 s). r0 and r1 ask 1,000/s of the rate; at 3 s r0 goes quiet
// and r2 (50/s) surges to 1,000/s; soon after, inside every lease in force (a lease is 1 s), the
// home forgets, and the links of the regions that held most are slow for
// 600 ms, so that the first region to tell the home what it holds is the
// one that asks for more. In every case the shares in force never add up
// to more than the limits, over any span the regions admit at most
// B + R·τ + N·k, and in any window at most its units.

// forgetRun drives the rig, moves the demand at 3 s (after before, when
// set), calls fault after (inside every lease) with the links of slow
// held up 600 ms, and checks the run once the regions are back (at 8 s
// on a quiet machine).
func forgetRun(t *testing.T, g *redisRig, before func(), after time.Duration, fault func(), slow ...int) {
	t.Helper()
	busy, quiet := make(chan struct{}), make(chan struct{})
	start := time.Now()
	g.pace(0, "tenant", rigRate, 1, 1000, busy)
	g.pace(1, "tenant", rigRate, 1, 1000, nil)
	g.pace(2, "tenant", rigRate, 1, 50, quiet)
	for i := range 3 {
		g.pace(i, "quota", rigWindow, 1, 150, nil)
	}
	time.Sleep(3 * time.Second)
	if before != nil {
		before()
	}
	close(busy)
	close(quiet)
	g.pace(0, "tenant", rigRate, 1, 50, nil)
	g.pace(2, "tenant", rigRate, 1, 1000, nil)
	time.Sleep(after)
	for _, i := range slow {
		g.links[i].setHold(600 * time.Millisecond)
	}
	at := time.Now()
	fault()
	t.Logf("the fault took %s", time.Since(at).Round(time.Millisecond))
	time.Sleep(600 * time.Millisecond)
	for _, i := range slow {
		g.links[i].setHold(0)
	}
	// The regions are back when a second admits 90% of the limit: by 8 s
	// on a quiet machine; a loaded one (a home's restart, starved
	// drivers) may take longer, which the run waits for, up to 30 s.
	time.Sleep(time.Until(start.Add(8 * time.Second)))
	admitted, _ := g.logs(rigRate)
	var back float64
	for {
		now := time.Now()
		back = admitted.Rate(-1, now.Add(-time.Second), now)
		if back >= 0.9*600 || now.Sub(start) > 30*time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	g.halt()
	end := time.Now()
	t.Logf("%s: %.0f/s admitted in the last second, %s after the start", g, back, end.Sub(start).Round(100*time.Millisecond))
	if back < 0.9*600 {
		t.Errorf("admitted %.0f/s in the last second, want the regions back at 90%% of the limit", back)
	}
	g.check(start, end)
}

// skipFaultsShort skips a home's failure under go test -short, which runs
// the fast core: each takes 8 s or more; the full test command runs them.
func skipFaultsShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: a failing home takes 8 s or more; the full test command runs it")
	}
}

// TestHomeRestartedEmpty restarts the home's redis-server (SHUTDOWN
// NOSAVE, no persistence: it comes back empty) inside every lease.
func TestHomeRestartedEmpty(t *testing.T) {
	skipFaultsShort(t) // before the rig starts
	g := newRedisRig(t, 2, rigConfig)
	o := g.home.Options()
	o.MaxRetries = -1 // the connection ends with the server: no retry
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	forgetRun(t, g, nil, 100*time.Millisecond, func() {
		_ = c.ShutdownNoSave(context.Background()).Err()
		g.home.Restart(t)
	}, 0, 1)
}

// TestHomeKilled kills the home (SIGKILL, as a crash) and starts it again
// 300 ms later, empty, inside every lease.
func TestHomeKilled(t *testing.T) {
	skipFaultsShort(t) // before the rig starts
	g := newRedisRig(t, 2, rigConfig)
	forgetRun(t, g, nil, 100*time.Millisecond, func() {
		g.home.Stop(t)
		time.Sleep(300 * time.Millisecond)
		g.home.Restart(t)
	}, 0, 1)
}

// TestHomeFlushed flushes the home (FLUSHALL) inside every lease.
func TestHomeFlushed(t *testing.T) {
	skipFaultsShort(t) // before the rig starts
	g := newRedisRig(t, 2, rigConfig)
	c := g.homeClient(t)
	forgetRun(t, g, nil, 100*time.Millisecond, func() {
		if err := c.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}, 0, 1)
}

// TestHomeFailedOver fails the home over to its replica inside every
// lease, losing its last writes: the replica's link to the primary is cut
// just before the demand moves, so it lacks every grant of the 700 ms that
// follow; then the primary is killed and the replica promoted in its place
// (the regions' links turn to it, as an address that fails over). The link
// of r2, which took the larger share the replica lacks, is slow after.
func TestHomeFailedOver(t *testing.T) {
	skipFaultsShort(t) // before the rig starts
	g := newRedisRig(t, 2, rigConfig)
	repl := newProxy(t, g.home.Addr())
	host, port, _ := strings.Cut(repl.Addr(), ":")
	replica := redistest.Start(t, "--replicaof", host, port)
	redistest.Eventually(t, 10*time.Second, func() error {
		if s := replica.Info(t, "replication", "master_link_status"); s != "up" {
			return fmt.Errorf("the replica's link is %q", s)
		}
		return nil
	})
	rc := replica.Client(t)
	forgetRun(t, g, func() { repl.turn("") }, 700*time.Millisecond, func() {
		g.home.Stop(t)
		if err := rc.SlaveOf(context.Background(), "NO", "ONE").Err(); err != nil {
			t.Fatal(err)
		}
		for _, l := range g.links {
			l.turn(replica.Addr())
		}
	}, 2)
}

// TestLateReports holds up one region's reports for 2 s (a slow link that
// delivers them after the region gave up on them) while its demand
// surges: the reports it made later, for the larger share it took, reach
// the home first; the held ones, for a smaller share, arrive 2 s late and
// change nothing. Its link is slow again (400 ms) as they arrive, so that
// the other regions report before it does. One process a region: a
// region's other processes would keep its count at the home up.
func TestLateReports(t *testing.T) {
	skipFaultsShort(t) // before the rig starts
	g := newRedisRig(t, 1, rigConfig)
	quiet := make(chan struct{})
	start := time.Now()
	g.pace(0, "tenant", rigRate, 1, 50, quiet)
	g.pace(1, "tenant", rigRate, 1, 1000, nil)
	g.pace(2, "tenant", rigRate, 1, 1000, nil)
	for i := range 3 {
		g.pace(i, "quota", rigWindow, 1, 150, nil)
	}
	time.Sleep(3 * time.Second)
	held := time.Now()
	g.links[0].setHold(2 * time.Second) // r0's next reports
	time.Sleep(rigConfig.Rebalance + 50*time.Millisecond)
	close(quiet)
	g.pace(0, "tenant", rigRate, 1, 1000, nil)
	g.links[0].setHold(0)
	time.Sleep(time.Until(held.Add(2*time.Second - 50*time.Millisecond)))
	g.links[0].setHold(400 * time.Millisecond) // as the held reports arrive
	time.Sleep(rigConfig.Rebalance + 400*time.Millisecond)
	g.links[0].setHold(0)
	time.Sleep(time.Until(start.Add(8 * time.Second)))
	g.halt()
	g.check(start, time.Now())
}
