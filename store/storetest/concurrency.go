package storetest

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/tollgate/tollgate"
)

// Concurrency: goroutines × calls on one key of capacity 100, with a 366-day
// period so that nothing refills (or rolls over) during the test.
const (
	goroutines = 16
	callsEach  = 25
	capacity   = 100
)

func weekLimit(alg tollgate.Algorithm) tollgate.Limit {
	return tollgate.Limit{Algorithm: alg, Rate: capacity, Period: tollgate.MaxPeriod, Burst: capacity}
}

// fanOut runs req from many goroutines at once and returns every decision.
func (s *suite) fanOut(t *testing.T, req tollgate.Request, perGoroutine int) []tollgate.Decision {
	t.Helper()
	var (
		mu    sync.Mutex
		all   []tollgate.Decision
		errs  []error
		start = make(chan struct{})
		wg    sync.WaitGroup
	)
	for range goroutines {
		wg.Go(func() {
			<-start
			var mine []tollgate.Decision
			for range perGoroutine {
				d, err := s.h.Store.Allow(context.Background(), req)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				mine = append(mine, d)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d calls failed, first: %v", len(errs), errs[0])
	}
	return all
}

// concurrency: exactly the capacity is admitted, each admission leaving a
// different remaining count, 99 down to 0.
func (s *suite) concurrency(t *testing.T, alg tollgate.Algorithm) {
	all := s.fanOut(t, tollgate.Request{Key: s.key(t), Limit: weekLimit(alg)}, callsEach)
	var remaining []int64
	for _, d := range all {
		switch {
		case d.Allowed:
			remaining = append(remaining, d.Remaining)
		case d.Remaining != 0 || d.RetryAfter <= 0:
			t.Fatalf("denial %+v: want 0 remaining and a positive RetryAfter", d)
		}
	}
	if len(remaining) != capacity {
		t.Fatalf("%d goroutines × %d calls admitted %d; want exactly %d", goroutines, callsEach, len(remaining), capacity)
	}
	slices.Sort(remaining)
	for i, r := range remaining {
		if r != int64(i) {
			t.Fatalf("admissions left remaining %v; want each of 0..%d exactly once", remaining, capacity-1)
		}
	}
}

// concurrentReplays: calls that all carry one request id are debited once
// per 1+replays of them, never more, never less.
func (s *suite) concurrentReplays(t *testing.T, alg tollgate.Algorithm) {
	const each = 3
	all := s.fanOut(t, tollgate.Request{Key: s.key(t), Limit: weekLimit(alg), RequestID: "one-id"}, each)
	debited := 0
	for _, d := range all {
		if !d.Allowed {
			t.Fatalf("denial %+v: the capacity exceeds the calls", d)
		}
		if !d.Replayed {
			debited++
		}
	}
	calls := goroutines * each
	if want := (calls + s.replays) / (1 + s.replays); debited != want {
		t.Fatalf("%d calls with one id, %d replays per admission: %d debited; want %d", calls, s.replays, debited, want)
	}
}
