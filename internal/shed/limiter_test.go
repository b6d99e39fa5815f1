package shed

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgate/tollgate/overload"
)

// fixed returns a Limiter whose limit stays n, with room for queue calls.
func fixed(t *testing.T, n, queue int) *Limiter {
	t.Helper()
	l, err := New(Options{MinLimit: n, MaxLimit: n, InitialLimit: n, MaxQueue: queue, ProbeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// waitFor starts Acquire for c in a goroutine and waits until it waits.
func waitFor(t *testing.T, l *Limiter, ctx context.Context, c Call, out chan<- result) {
	t.Helper()
	go func() {
		s, err := l.Acquire(ctx, c)
		out <- result{c, s, err}
	}()
	synctest.Wait()
}

type result struct {
	call Call
	seat *Seat
	err  error
}

func TestOptionsRejectedByName(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{MinLimit: -1}, "MinLimit"},
		{Options{MinLimit: 5, MaxLimit: 4, InitialLimit: 4}, "MinLimit 5 is above MaxLimit 4"},
		{Options{InitialLimit: 2000}, "InitialLimit 2000"},
		{Options{Tolerance: 0.5}, "Tolerance"},
		{Options{MaxWait: time.Millisecond, Target: time.Second}, "Target"},
		{Options{RetryAfter: -time.Second}, "RetryAfter"},
	} {
		if _, err := New(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error naming %q", c.o, err, c.want)
		}
	}
	if _, err := New(Options{}); err != nil {
		t.Fatalf("New(Options{}) = %v", err)
	}
}

// TestHigherCriticalityFirst: with one seat taken, waiters of every
// criticality are admitted most critical first, whatever their arrival.
func TestHigherCriticalityFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fixed(t, 1, 10)
		first, err := l.Acquire(t.Context(), Call{Criticality: Critical})
		if err != nil {
			t.Fatal(err)
		}
		out := make(chan result, 4)
		for _, c := range []Criticality{SheddablePlus, CriticalPlus, Sheddable, Critical} {
			waitFor(t, l, t.Context(), Call{Criticality: c}, out)
		}
		first.Done()
		for _, want := range []Criticality{CriticalPlus, Critical, SheddablePlus, Sheddable} {
			r := <-out
			if r.err != nil || r.call.Criticality != want {
				t.Fatalf("admitted %v (%v), want %v", r.call.Criticality, r.err, want)
			}
			r.seat.Done()
		}
	})
}

// TestFullRoomShedsLowestFirst: a full room evicts its least critical
// waiter for a more critical arrival, refuses an arrival no better than
// its worst, and Check says the same without waiting.
func TestFullRoomShedsLowestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fixed(t, 1, 2)
		seat, _ := l.Acquire(t.Context(), Call{})
		out := make(chan result, 4)
		waitFor(t, l, t.Context(), Call{Criticality: Sheddable}, out)
		waitFor(t, l, t.Context(), Call{Criticality: Critical}, out)
		if err := l.Check(Call{Criticality: Sheddable}); !errors.Is(err, overload.ErrShed) {
			t.Fatalf("Check(Sheddable) on a full room = %v, want overload.ErrShed", err)
		}
		if err := l.Check(Call{Criticality: SheddablePlus}); err != nil {
			t.Fatalf("Check(SheddablePlus) = %v, want nil: it goes before a waiting Sheddable", err)
		}
		waitFor(t, l, t.Context(), Call{Criticality: Critical, Tenant: "other"}, out)
		r := <-out
		var ref *Refusal
		if !errors.As(r.err, &ref) || ref.Reason != Evicted || r.call.Criticality != Sheddable {
			t.Fatalf("got %+v, want the Sheddable waiter evicted", r)
		}
		_, err := l.Acquire(t.Context(), Call{Criticality: Critical})
		if !errors.As(err, &ref) || ref.Reason != QueueFull {
			t.Fatalf("Acquire(Critical) on a room of two Critical calls, one of its tenant = %v, want QueueFull", err)
		}
		seat.Done()
		for _, want := range []Criticality{Critical, Critical} {
			r := <-out
			if r.err != nil || r.call.Criticality != want {
				t.Fatalf("admitted %+v, want %v", r, want)
			}
			r.seat.Done()
		}
		st := l.Stats()
		if st.Shed[Sheddable].WithinShare+st.Shed[Sheddable].OverShare != 2 || st.Shed[Critical].WithinShare+st.Shed[Critical].OverShare != 1 {
			t.Fatalf("shed counts %+v, want 2 Sheddable (Check, eviction) and 1 Critical", st.Shed)
		}
	})
}

// TestCriticalPlusNeverWaitsForLess: with every seat taken by less
// critical calls, a CriticalPlus call takes the one seat beyond the limit
// at once; a second one waits, and goes first.
func TestCriticalPlusNeverWaitsForLess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fixed(t, 1, 10)
		low, _ := l.Acquire(t.Context(), Call{Criticality: Sheddable})
		out := make(chan result, 2)
		waitFor(t, l, t.Context(), Call{Criticality: Critical}, out)
		cp, err := l.Acquire(t.Context(), Call{Criticality: CriticalPlus})
		if err != nil {
			t.Fatalf("CriticalPlus with the limit's seats taken: %v, want its own seat", err)
		}
		waitFor(t, l, t.Context(), Call{Criticality: CriticalPlus}, out)
		if st := l.Stats(); st.InFlight != 2 || st.Queued != 2 {
			t.Fatalf("stats %+v, want 2 in flight and 2 waiting", st)
		}
		cp.Done()
		if r := <-out; r.call.Criticality != CriticalPlus || r.err != nil {
			t.Fatalf("got %+v, want the waiting CriticalPlus call", r)
		} else {
			r.seat.Done()
		}
		low.Done()
		if r := <-out; r.call.Criticality != Critical || r.err != nil {
			t.Fatalf("got %+v, want the Critical call", r)
		} else {
			r.seat.Done()
		}
	})
}

// TestTenantServedLeastGoesFirst: a tenant that had many calls admitted
// waits behind one that had none, and is the one evicted from a full room.
func TestTenantServedLeastGoesFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fixed(t, 1, 3)
		for range 5 {
			s, err := l.Acquire(t.Context(), Call{Tenant: "heavy"})
			if err != nil {
				t.Fatal(err)
			}
			s.Done()
		}
		seat, _ := l.Acquire(t.Context(), Call{Tenant: "heavy"})
		out := make(chan result, 4)
		waitFor(t, l, t.Context(), Call{Tenant: "heavy"}, out)
		waitFor(t, l, t.Context(), Call{Tenant: "heavy"}, out)
		waitFor(t, l, t.Context(), Call{Tenant: "light"}, out)
		waitFor(t, l, t.Context(), Call{Tenant: "light2"}, out) // room full: evicts the oldest heavy waiter
		r := <-out
		if r.call.Tenant != "heavy" || !errors.Is(r.err, overload.ErrShed) {
			t.Fatalf("got %+v, want a heavy waiter evicted", r)
		}
		seat.Done()
		var order []string
		for range 3 {
			r := <-out
			if r.err != nil {
				t.Fatal(r.err)
			}
			order = append(order, r.call.Tenant)
			r.seat.Done()
		}
		if order[2] != "heavy" {
			t.Fatalf("admitted %v, want the light tenants before heavy", order)
		}
	})
}

// TestStandingQueueTarget: a room not empty for an Interval sheds, at
// Target, the calls of a tenant queued past its share, and lets the calls
// within its share wait up to MaxWait.
func TestStandingQueueTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Options{MinLimit: 2, MaxLimit: 2, InitialLimit: 2, ProbeInterval: -1, MaxWait: time.Second, Target: 200 * time.Millisecond, MaxQueue: 100})
		if err != nil {
			t.Fatal(err)
		}
		first, _ := l.Acquire(t.Context(), Call{Tenant: "t"})  // tag 0
		second, _ := l.Acquire(t.Context(), Call{Tenant: "t"}) // tag 1: the clock
		out := make(chan result, 16)
		start := time.Now()
		for range withinShare + 1 { // tags 2 … 1+withinShare are within t's share, the last past it
			waitFor(t, l, t.Context(), Call{Tenant: "t"}, out)
		}
		waitFor(t, l, t.Context(), Call{Tenant: "below"}, out)
		time.Sleep(150 * time.Millisecond)
		if !l.Stats().Standing {
			t.Fatal("not standing after 150ms with calls waiting")
		}
		time.Sleep(60 * time.Millisecond)
		first.Done() // sheds the call past t's share (210ms > Target), admits below
		var below *Seat
		for range 2 {
			r := <-out
			var ref *Refusal
			switch {
			case r.call.Tenant == "t" && errors.As(r.err, &ref) && ref.Reason == QueueTimeout && time.Since(start) == 210*time.Millisecond:
			case r.call.Tenant == "below" && r.err == nil:
				below = r.seat
			default:
				t.Fatalf("at %s: %+v, want t's call past its share shed at Target and below admitted", time.Since(start), r)
			}
		}
		if got := l.Stats().Queued; got != withinShare {
			t.Fatalf("%d waiting after below was admitted, want t's %d within its share", got, withinShare)
		}
		below.Done()
		second.Done()
		for range withinShare {
			r := <-out
			if r.err != nil {
				t.Fatalf("t call within its share: %v after %s", r.err, time.Since(start))
			}
			r.seat.Done()
		}
	})
}

// TestBestNewestOfTheTenantFirstWhenStanding: the room's next call is the
// most critical, then the lowest start tag; under a standing queue, the
// newest call of that tenant instead of its oldest.
func TestBestNewestOfTheTenantFirstWhenStanding(t *testing.T) {
	now := time.Now()
	r := newRoom(now)
	a1 := &waiter{call: Call{Criticality: Critical, Tenant: "a"}, tag: 1, seq: 1}
	b := &waiter{call: Call{Criticality: Critical, Tenant: "b"}, tag: 2, seq: 2}
	a2 := &waiter{call: Call{Criticality: Critical, Tenant: "a"}, tag: 3, seq: 3}
	low := &waiter{call: Call{Criticality: Sheddable, Tenant: "c"}, tag: 0, seq: 0}
	for _, w := range []*waiter{a1, b, a2, low} {
		r.add(w, now)
	}
	if w, head := r.best(func(Criticality) bool { return false }); w != a1 || head != a1 {
		t.Fatalf("FIFO: best %+v head %+v, want a's oldest", w, head)
	}
	if w, head := r.best(func(Criticality) bool { return true }); w != a2 || head != a1 {
		t.Fatalf("LIFO: best %+v head %+v, want a's newest in a's place", w, head)
	}
	if w := r.worst(); w != low {
		t.Fatalf("worst %+v, want the Sheddable call", w)
	}
}

// TestWaitBoundedByMaxWaitAndContext: a waiter gives up at MaxWait with a
// Refusal, or at its context's end with the context's error.
func TestWaitBoundedByMaxWaitAndContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fixed(t, 1, 10)
		seat, _ := l.Acquire(t.Context(), Call{})
		defer seat.Done()
		start := time.Now()
		_, err := l.Acquire(t.Context(), Call{})
		var ref *Refusal
		if !errors.As(err, &ref) || ref.Reason != QueueTimeout || time.Since(start) != 100*time.Millisecond {
			t.Fatalf("Acquire = %v after %s, want QueueTimeout after MaxWait (100ms)", err, time.Since(start))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		if _, err := l.Acquire(ctx, Call{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire with a 10ms context = %v, want DeadlineExceeded", err)
		}
		if st := l.Stats(); st.Queued != 0 || st.InFlight != 1 {
			t.Fatalf("stats %+v, want nothing left waiting and one seat taken", st)
		}
	})
}

// TestManyCallersExactCounts: many goroutines through a limit of 3 and a
// small room: never more than 3 run at once (4 with the CriticalPlus
// seat), and every call is admitted,
// shed or timed out, counted once.
func TestManyCallersExactCounts(t *testing.T) {
	l, err := New(Options{MinLimit: 3, MaxLimit: 3, InitialLimit: 3, MaxQueue: 5, ProbeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	running, peak, admitted, shed := 0, 0, 0, 0
	var wg sync.WaitGroup
	const n = 2000
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := l.Acquire(context.Background(), Call{Criticality: Criticality(i % Levels), Tenant: string(rune('a' + i%7))})
			mu.Lock()
			if err != nil {
				if !errors.Is(err, overload.ErrShed) {
					t.Errorf("Acquire: %v", err)
				}
				shed++
				mu.Unlock()
				return
			}
			admitted++
			running++
			peak = max(peak, running)
			mu.Unlock()
			time.Sleep(50 * time.Microsecond)
			mu.Lock()
			running--
			mu.Unlock()
			s.Done()
		}()
	}
	wg.Wait()
	st := l.Stats()
	var sAdm, sShed uint64
	for c := range Levels {
		sAdm += st.Admitted[c]
		sShed += st.Shed[c].WithinShare + st.Shed[c].OverShare
	}
	if peak > 4 || admitted+shed != n || int(sAdm) != admitted || int(sShed) != shed || st.InFlight != 0 || st.Queued != 0 {
		t.Fatalf("peak %d admitted %d shed %d; stats %+v", peak, admitted, shed, st)
	}
}
