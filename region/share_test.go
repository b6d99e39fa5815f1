package region

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgate/tollgate"
)

// memoryStores returns n Memory stores, one per region.
func memoryStores(t *testing.T, n int) []tollgate.Store {
	sts := make([]tollgate.Store, n)
	for i := range sts {
		sts[i] = newMemory(t)
	}
	return sts
}

// TestSkewedDemandIsMaxMinFair asks 10, 50 and 1,000 calls a second of a
// 600/s limit in three regions: once the new Home has settled (a lease
// from the first report, and an interval more to report), they admit at
// least 95% of the limit together, each within 10% of its max-min fair
// share (10, 50, 540), and never more than the limit.
func TestSkewedDemandIsMaxMinFair(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limit := tollgate.PerSecond(600)
		w := newWorld(t, NewMemoryHome(nil), memoryStores(t, 3), Config{Limits: []tollgate.Limit{limit}, Rebalance: 250 * time.Millisecond})
		start := time.Now()
		for i, every := range []time.Duration{100 * time.Millisecond, 20 * time.Millisecond, time.Millisecond} {
			w.drive(i, "tenant", limit, 1, every, nil)
		}
		time.Sleep(10 * time.Second)
		w.halt()

		from, to := start.Add(1500*time.Millisecond), start.Add(10*time.Second)
		secs := to.Sub(from).Seconds()
		total := float64(w.between(-1, from, to)) / secs
		if total < 0.95*600 {
			t.Errorf("admitted %.0f/s together, want at least 95%% of 600", total)
		}
		for i, fair := range []float64{10, 50, 540} {
			got := float64(w.between(i, from, to)) / secs
			t.Logf("region %d admitted %.1f/s, fair share %.0f", i, got, fair)
			if got < 0.9*fair || got > 1.1*fair {
				t.Errorf("region %d admitted %.1f/s, want within 10%% of its fair share %.0f", i, got, fair)
			}
		}
		w.checkEnvelope(limit, w.slack(10*time.Second, 250*time.Millisecond), 100*time.Millisecond, time.Second, 5*time.Second)
	})
}

// TestDemandMoves makes the busiest region go quiet and a quiet one surge:
// within two rebalance intervals of the move being reported, the regions
// admit at least 95% of the limit again, and the shares in force never add
// up to more than it.
func TestDemandMoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limit := tollgate.PerSecond(600)
		const interval = 250 * time.Millisecond
		w := newWorld(t, NewMemoryHome(nil), memoryStores(t, 3), Config{Limits: []tollgate.Limit{limit}, Rebalance: interval})
		busy, quiet := make(chan struct{}), make(chan struct{})
		w.drive(0, "tenant", limit, 1, time.Millisecond, busy)      // 1,000/s, then nothing
		w.drive(1, "tenant", limit, 1, 100*time.Millisecond, quiet) // 10/s, then 1,000/s
		w.drive(2, "tenant", limit, 1, 20*time.Millisecond, nil)    // 50/s throughout
		time.Sleep(5 * time.Second)
		shift := time.Now()
		close(busy)
		close(quiet)
		w.drive(1, "tenant", limit, 1, time.Millisecond, nil)
		time.Sleep(5 * time.Second)
		w.halt()

		before := float64(w.between(-1, shift.Add(-3*time.Second), shift)) / 3
		// The move is reported within one interval; two more and the shares follow it.
		from := shift.Add(3 * interval)
		after := float64(w.between(-1, from, from.Add(3*time.Second))) / 3
		t.Logf("admitted %.0f/s before the move, %.0f/s from three intervals after it", before, after)
		for _, got := range []float64{before, after} {
			if got < 0.95*600 {
				t.Errorf("admitted %.0f/s, want at least 95%% of 600", got)
			}
		}
		w.checkShares("tenant", limit, shift.Add(-5*time.Second), shift.Add(5*time.Second))
		w.checkEnvelope(limit, w.slack(10*time.Second, interval), 100*time.Millisecond, time.Second)
	})
}

// TestCutOffRegion cuts one region's link to the Home for 30 seconds while
// every region asks more than the limit: the cut region serves from its
// lease until it ends, then from its floor; the others take its share only
// once its lease has ended; the shares in force never add up to more than
// the limit; within two intervals of the link's return the regions admit
// at least 95% of the limit again.
func TestCutOffRegion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limit := tollgate.PerSecond(600)
		const interval, lease = 250 * time.Millisecond, 750 * time.Millisecond
		home := &cutHome{Home: NewMemoryHome(nil)}
		w := newWorld(t, home, memoryStores(t, 3), Config{Limits: []tollgate.Limit{limit}, Rebalance: interval, Lease: lease})
		for i := range 3 {
			w.drive(i, "tenant", limit, 1, time.Millisecond, nil)
		}
		time.Sleep(3 * time.Second)
		cut := time.Now()
		home.setCut("r2", true)
		time.Sleep(30 * time.Second)
		restored := time.Now()
		home.setCut("r2", false)
		time.Sleep(3 * time.Second)
		w.halt()

		rate := w.rate
		// Its last renewal was at most an interval before the cut, so its
		// lease lasts here until at least lease - skew - interval after it.
		onLease := rate(2, cut, cut.Add(lease-defaultClockSkew-interval))
		onFloor := rate(2, cut.Add(lease+interval), restored)
		others := rate(0, cut.Add(2*lease), restored) + rate(1, cut.Add(2*lease), restored)
		t.Logf("cut region: %.0f/s on its lease, %.0f/s on its floor; the others %.0f/s once its lease ended", onLease, onFloor, others)
		if onLease < 0.9*200 {
			t.Errorf("the cut region admitted %.0f/s while its lease lasted, want its share, about 200/s", onLease)
		}
		if onFloor < 0.9*20 || onFloor > 1.1*20 {
			t.Errorf("the cut region admitted %.0f/s after its lease, want its floor, 20/s", onFloor)
		}
		if others < 0.95*580 {
			t.Errorf("the other regions admitted %.0f/s once the lease ended, want at least 95%% of 580", others)
		}
		back := rate(-1, restored.Add(2*interval), restored.Add(2*interval+2*time.Second))
		t.Logf("every region: %.0f/s from two intervals after the link returned", back)
		if back < 0.95*600 {
			t.Errorf("admitted %.0f/s after the link returned, want at least 95%% of 600", back)
		}
		w.checkShares("tenant", limit, cut.Add(-3*time.Second), restored.Add(3*time.Second))
		w.checkEnvelope(limit, w.slack(36*time.Second, interval), 100*time.Millisecond, time.Second, 10*time.Second)
	})
}

// TestMonthlyQuotaUsedUp shares a monthly quota of 10,000,000 units among
// three regions asking 10, 50 and 1,000 requests of 1,000 units a second:
// they use at least 99.9% of it, and never more.
func TestMonthlyQuotaUsedUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quota := tollgate.Monthly(10_000_000)
		w := newWorld(t, NewMemoryHome(nil), memoryStores(t, 3), Config{Limits: []tollgate.Limit{quota}, Rebalance: 250 * time.Millisecond})
		time.Sleep(time.Hour) // away from the month's start, where the regions decide under their floors
		for i, every := range []time.Duration{100 * time.Millisecond, 20 * time.Millisecond, time.Millisecond} {
			w.drive(i, "tenant", quota, 1000, every, nil)
		}
		time.Sleep(30 * time.Second)
		w.halt()
		used := w.between(-1, time.Time{}, time.Now().Add(time.Hour))
		t.Logf("used %d of %d (%.3f%%): %d, %d, %d", used, quota.Rate, 100*float64(used)/float64(quota.Rate),
			w.between(0, time.Time{}, time.Now().Add(time.Hour)), w.between(1, time.Time{}, time.Now().Add(time.Hour)), w.between(2, time.Time{}, time.Now().Add(time.Hour)))
		if used > quota.Rate {
			t.Errorf("used %d, more than the quota %d", used, quota.Rate)
		}
		if float64(used) < 0.999*float64(quota.Rate) {
			t.Errorf("used %d, less than 99.9%% of the quota %d", used, quota.Rate)
		}
	})
}
