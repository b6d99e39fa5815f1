package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
)

// TestConcurrentSettlesShareScriptCalls settles from 32 goroutines at once
// (each admission of 10 units settled at 3, then overdrawn by 2, on
// identities of its own): the settlements take the decisions' batched
// road, so they share settle script calls (far fewer calls than
// settlements, on a private server whose counts are the test's alone), and
// every identity ends exactly where its own calls put it.
func TestConcurrentSettlesShareScriptCalls(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedis(t, srv.Client(t), WithPrefix(redistest.KeyPrefix(t)))
	ctx := context.Background()
	limit := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1, Period: 7 * 24 * time.Hour, Burst: 1000}
	const callers, rounds = 32, 40
	before, _, _ := commandStats(t, srv, "evalsha")
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range rounds {
				req := tollgate.Request{Key: fmt.Sprintf("id-%d-%d", g, i%4), Limit: limit, Cost: 10}
				d, err := st.Allow(ctx, req)
				if err != nil || !d.Allowed {
					t.Errorf("admission: %+v %v", d, err)
					return
				}
				if _, err := st.Settle(ctx, req, d.Admission(), 3); err != nil {
					t.Errorf("settle: %v", err)
					return
				}
				if _, err := st.Allow(ctx, tollgate.Request{Key: req.Key, Limit: limit, Cost: 2, Overdraw: true}); err != nil {
					t.Errorf("overdraw: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	after, _, _ := commandStats(t, srv, "evalsha")
	calls, settles := after-before, int64(callers*rounds*2)
	t.Logf("%d admissions and %d settlements and overdraws in %d script calls", callers*rounds, settles, calls)
	if calls >= int64(callers*rounds)+settles*3/4 {
		t.Errorf("%d script calls for %d decisions and %d settlements: the settlements did not share calls", calls, callers*rounds, settles)
	}
	for g := range callers {
		for k := range 4 {
			d, err := st.Peek(ctx, tollgate.Request{Key: fmt.Sprintf("id-%d-%d", g, k), Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			// Each round: 10 debited, 7 given back, 2 overdrawn.
			if want := int64(1000 - rounds/4*5 - 1); d.Remaining != want {
				t.Fatalf("id-%d-%d: %d left after its calls, want %d", g, k, d.Remaining, want)
			}
		}
	}
}
