package shed

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// offer runs calls at rate for d, each holding its seat for hold(n), n the
// calls in flight when it starts, and returns the calls admitted.
func offer(l *Limiter, rate float64, d time.Duration, hold func(n int64) time.Duration) int64 {
	var wg sync.WaitGroup
	var inflight, admitted atomic.Int64
	gap := time.Duration(float64(time.Second) / rate)
	for start := time.Now(); time.Since(start) < d; time.Sleep(gap) {
		wg.Go(func() {
			s, err := l.Acquire(context.Background(), Call{Criticality: Critical})
			if err != nil {
				return
			}
			admitted.Add(1)
			n := inflight.Add(1)
			time.Sleep(hold(n))
			inflight.Add(-1)
			s.Done()
		})
	}
	wg.Wait()
	return admitted.Load()
}

// TestLimitSettlesNearTheKneeOfASharedCPU: calls that share one CPU take
// n ms when n run; offered 4 calls/ms, the limit settles near Tolerance
// calls, and the server still completes about one call per ms.
func TestLimitSettlesNearTheKneeOfASharedCPU(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		admitted := offer(l, 4000, 5*time.Second, func(n int64) time.Duration { return time.Duration(n) * time.Millisecond })
		st := l.Stats()
		if st.Limit < 1 || st.Limit > 4 {
			t.Fatalf("limit %.1f after 5s, want near Tolerance (2)", st.Limit)
		}
		if admitted < 4000 { // 5s at about a call per ms, less the start
			t.Fatalf("%d calls admitted in 5s, want about 5000", admitted)
		}
	})
}

// TestLimitGrowsForCallsThatWaitElsewhere: calls that take 10ms whatever
// runs beside them, offered 5 per ms (50 in flight): the limit grows from
// 16 past 50 and nearly every call is admitted.
func TestLimitGrowsForCallsThatWaitElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		offer(l, 5000, 2*time.Second, func(int64) time.Duration { return 10 * time.Millisecond })
		admitted := offer(l, 5000, 2*time.Second, func(int64) time.Duration { return 10 * time.Millisecond })
		if st := l.Stats(); st.Limit < 50 || admitted < 9900 {
			t.Fatalf("limit %.1f, %d of 10000 admitted; want the limit above the 50 in flight and all admitted", st.Limit, admitted)
		}
	})
}
