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

func mustAllow(t *testing.T, b *Breaker, wantOK, wantProbe bool) Ticket {
	t.Helper()
	tk, ok := b.Allow()
	if ok != wantOK || tk.Probe != wantProbe {
		t.Fatalf("allow() = (%v, probe %v), want (%v, probe %v)", ok, tk.Probe, wantOK, wantProbe)
	}
	return tk
}

func TestBreakerOpensAfterConsecutiveFailures(t *testing.T) {
	b, clock := newTestBreaker(3, time.Second)
	// Two failures, then a success: the count starts again.
	for range 2 {
		b.Done(mustAllow(t, b, true, false), Failed)
	}
	b.Done(mustAllow(t, b, true, false), OK)
	for range 2 {
		b.Done(mustAllow(t, b, true, false), Failed)
	}
	// Cancelled callers say nothing about the store.
	b.Done(mustAllow(t, b, true, false), NoNews)
	late := mustAllow(t, b, true, false)
	b.Done(mustAllow(t, b, true, false), Failed) // the third in a row
	mustAllow(t, b, false, false)

	// A call that started before the breaker opened and succeeds late does
	// not close it: only a probe does.
	b.Done(late, OK)
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
		b.Done(mustAllow(t, b, true, false), Failed)
	}
	mustAllow(t, b, true, false)
}

// Calls let through together that fail together saw one stall of the
// store: they count as one failure, however many they are, and the
// breaker opens only after failures consecutive in time.
func TestBreakerCountsOverlappingFailuresOnce(t *testing.T) {
	b, _ := newTestBreaker(3, time.Second)
	for round := 1; round <= 3; round++ {
		tickets := make([]Ticket, 64)
		for i := range tickets {
			tickets[i] = mustAllow(t, b, true, false)
		}
		var wg sync.WaitGroup
		for _, tk := range tickets {
			wg.Go(func() { b.Done(tk, Failed) })
		}
		wg.Wait()
		if _, ok := b.Allow(); ok != (round < 3) {
			t.Fatalf("after %d rounds of 64 overlapping failures: open = %v, want %v", round, !ok, round == 3)
		}
	}
	// A call let through before a failure was counted, failing after it,
	// does not count either; a success in between starts the count again.
	b, _ = newTestBreaker(2, time.Second)
	early := mustAllow(t, b, true, false)
	b.Done(mustAllow(t, b, true, false), Failed)
	b.Done(early, Failed)
	mustAllow(t, b, true, false)
	b.Done(mustAllow(t, b, true, false), OK)
	b.Done(mustAllow(t, b, true, false), Failed)
	mustAllow(t, b, true, false)
	b.Done(mustAllow(t, b, true, false), Failed)
	mustAllow(t, b, false, false)
}

func TestBreakerDisabled(t *testing.T) {
	b, _ := newTestBreaker(0, 0)
	for range 100 {
		b.Done(mustAllow(t, b, true, false), Failed)
	}
}

// Many callers racing past the cool-down: exactly one probes, and the
// others go to their fail policy without touching the store.
func TestBreakerOneProbeUnderConcurrency(t *testing.T) {
	b, clock := newTestBreaker(5, time.Second)
	const goroutines = 64
	var wg sync.WaitGroup
	// Trip it: five failures, one after another.
	for range 5 {
		b.Done(mustAllow(t, b, true, false), Failed)
	}
	if _, ok := b.Allow(); ok {
		t.Fatal("breaker still closed after 5 consecutive failures")
	}
	clock.Advance(time.Second)
	var probes, allowed atomic.Int64
	start := make(chan struct{})
	var gotProbe sync.WaitGroup
	gotProbe.Add(goroutines)
	for range goroutines {
		wg.Go(func() {
			<-start
			tk, ok := b.Allow()
			if ok {
				allowed.Add(1)
			}
			if tk.Probe {
				probes.Add(1)
			}
			gotProbe.Done()
			gotProbe.Wait() // hold the probe until every caller has asked
			if ok {
				b.Done(tk, OK)
			}
		})
	}
	close(start)
	wg.Wait()
	if probes.Load() != 1 || allowed.Load() != 1 {
		t.Fatalf("probes = %d, allowed = %d; want exactly 1 of %d callers", probes.Load(), allowed.Load(), goroutines)
	}
	if tk, ok := b.Allow(); !ok || tk.Probe {
		t.Fatalf("after a successful probe allow() = (%v, probe %v), want closed", ok, tk.Probe)
	}
}
