package shed

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestFloodingTenantLeavesOthersTheirShare: on a server that serves one
// call per millisecond, nine tenants asking 0.9 of their tenth each and one
// asking ten tenths: the nine get at least 95% of what they ask, the
// flooding tenant what is left.
func TestFloodingTenantLeavesOthersTheirShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Options{MinLimit: 1, MaxLimit: 1, InitialLimit: 1, ProbeInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		const capacity = 1000.0 // calls/s: each holds its seat 1ms
		rates := map[string]float64{"heavy": capacity}
		for i := range 9 {
			rates[fmt.Sprint("light-", i)] = 0.9 * capacity / 10
		}
		var mu sync.Mutex
		asked, served := map[string]int{}, map[string]int{}
		reasons := map[Reason]int{}
		defer func() { t.Logf("light refusals by reason: %v", reasons) }()
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		rng := rand.New(rand.NewPCG(1, 2))
		for tenant, rate := range rates {
			gap := make([]time.Duration, 0, 4000)
			for range cap(gap) {
				gap = append(gap, time.Duration(rng.ExpFloat64()/rate*float64(time.Second)))
			}
			wg.Go(func() {
				for _, g := range gap {
					time.Sleep(g)
					if ctx.Err() != nil {
						return
					}
					wg.Go(func() {
						s, err := l.Acquire(ctx, Call{Criticality: Critical, Tenant: tenant})
						mu.Lock()
						asked[tenant]++
						if err == nil {
							served[tenant]++
						} else if r, ok := err.(*Refusal); ok && tenant != "heavy" {
							reasons[r.Reason]++
						}
						mu.Unlock()
						if err == nil {
							time.Sleep(time.Millisecond)
							s.Done()
						}
					})
				}
			})
		}
		wg.Wait()
		for tenant := range rates {
			f := float64(served[tenant]) / float64(asked[tenant])
			t.Logf("%s: asked %d, served %.3f", tenant, asked[tenant], f)
			if tenant != "heavy" && f < 0.95 {
				t.Errorf("%s served %.3f of what it asked, want ≥ 0.95", tenant, f)
			}
		}
	})
}
