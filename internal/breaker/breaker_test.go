package breaker

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fakeclock"
)

func newTestBreaker(threshold int, coolDown time.Duration) (*Breaker, *fakeclock.Clock) {
	clock := fakeclock.New(time.Unix(1_000_000, 0))
	b := New(threshold, coolDown)
	b.now = clock.Now
	return b, clock
}

func mustAllow(t *testing.T, b *Breaker, wantOK, wantProbe bool) bool {
	t.Helper()
	ok, probe := b.Allow()
	if ok != wantOK || probe != wantProbe {
		t.Fatalf("allow() = (%v, %v), want (%v, %v)", ok, probe, wantOK, wantProbe)
	}
	return probe
}

func TestBreakerOpensAfterConsecutiveFailures(t *testing.T) {
	b, clock := newTestBreaker(3, time.Second)
	// Two failures, then a success: the count starts again.
	for range 2 {
		mustAllow(t, b, true, false)
		b.Done(false, Failed)
	}
	mustAllow(t, b, true, false)
	b.Done(false, OK)
	for range 2 {
		mustAllow(t, b, true, false)
		b.Done(false, Failed)
	}
	// Cancelled callers say nothing about the store.
	mustAllow(t, b, true, false)
	b.Done(false, NoNews)
	mustAllow(t, b, true, false)
	b.Done(false, Failed) // the third in a row
	mustAllow(t, b, false, false)

	// A call that started before the breaker opened and succeeds late does
	// not close it: only a probe does.
	b.Done(false, OK)
	mustAllow(t, b, false, false)

	clock.Advance(time.Second - time.Nanosecond)
	mustAllow(t, b, false, false)
	clock.Advance(time.Nanosecond)
	probe := mustAllow(t, b, true, true)
	mustAllow(t, b, false, false) // one probe at a time
	b.Done(probe, Failed)         // the store is still down: open again
	clock.Advance(time.Second / 2)
	mustAllow(t, b, false, false)
	clock.Advance(time.Second / 2)
	probe = mustAllow(t, b, true, true)
	b.Done(probe, NoNews) // the prober went away: the next call probes at once
	probe = mustAllow(t, b, true, true)
	b.Done(probe, OK)
	mustAllow(t, b, true, false)
	// Closed again, with a fresh count.
	for range 2 {
		b.Done(false, Failed)
	}
	mustAllow(t, b, true, false)
}

func TestBreakerDisabled(t *testing.T) {
	b, _ := newTestBreaker(0, 0)
	for range 100 {
		mustAllow(t, b, true, false)
		b.Done(false, Failed)
	}
}

// Many callers racing past the cool-down: exactly one probes, and the
// others go to their fail policy without touching the store.
func TestBreakerOneProbeUnderConcurrency(t *testing.T) {
	b, clock := newTestBreaker(5, time.Second)
	const goroutines = 64
	var wg sync.WaitGroup
	// Trip it from many goroutines at once: every failure counts.
	for range goroutines {
		wg.Go(func() {
			if ok, probe := b.Allow(); ok {
				b.Done(probe, Failed)
			}
		})
	}
	wg.Wait()
	if ok, _ := b.Allow(); ok {
		t.Fatal("breaker still closed after 64 concurrent failures")
	}
	clock.Advance(time.Second)
	var probes, allowed atomic.Int64
	start := make(chan struct{})
	var gotProbe sync.WaitGroup
	gotProbe.Add(goroutines)
	for range goroutines {
		wg.Go(func() {
			<-start
			ok, probe := b.Allow()
			if ok {
				allowed.Add(1)
			}
			if probe {
				probes.Add(1)
			}
			gotProbe.Done()
			gotProbe.Wait() // hold the probe until every caller has asked
			if ok {
				b.Done(probe, OK)
			}
		})
	}
	close(start)
	wg.Wait()
	if probes.Load() != 1 || allowed.Load() != 1 {
		t.Fatalf("probes = %d, allowed = %d; want exactly 1 of %d callers", probes.Load(), allowed.Load(), goroutines)
	}
	if ok, probe := b.Allow(); !ok || probe {
		t.Fatalf("after a successful probe allow() = (%v, %v), want closed", ok, probe)
	}
}
