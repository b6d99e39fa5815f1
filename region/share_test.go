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
// 600/s limit in three regions: from two rebalance intervals on, they
// admit at least 95% of the limit together, each within 10% of its
// max-min fair share (10, 50, 540), and never more than the limit.
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

		from, to := start.Add(500*time.Millisecond), start.Add(10*time.Second)
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
		w.checkEnvelope(limit, 3*int64(10/0.25), 100*time.Millisecond, time.Second, 5*time.Second)
	})
}
