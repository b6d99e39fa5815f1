package flight

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// Budget is half the time a context has left, exactly (the clock of a
// synctest bubble does not move while the test runs).
func TestBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if got := Budget(context.Background()); got != MaxWait {
			t.Errorf("without a deadline: %s, want %s", got, MaxWait)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if got := Budget(ctx); got != 500*time.Millisecond {
			t.Errorf("with 1s left: %s, want 500ms", got)
		}
		past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		if got := Budget(past); got != 0 {
			t.Errorf("past the deadline: %s, want 0", got)
		}
	})
}

// A caller waiting for a flight returns when it lands.
func TestWaitForALanding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := Start()
		w := NewWaiter(context.Background())
		if !w.MayWait() {
			t.Fatal("a caller that never waited may not wait")
		}
		waited := make(chan error, 1)
		go func() { waited <- w.Wait(f) }()
		synctest.Wait() // the caller waits for f
		select {
		case err := <-waited:
			t.Fatalf("Wait returned %v before the flight landed", err)
		default:
		}
		f.Land()
		if err := <-waited; err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if landed, err := w.WaitWithin(f); !landed || err != nil {
			t.Fatalf("WaitWithin a landed flight: %v, %v", landed, err)
		}
	})
}

// Wait outlasts the budget; only the context ends it. WaitWithin ends with
// the budget, and MayWait is false from then on.
func TestWaitWithinTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		f := Start()
		defer f.Land()
		w := NewWaiter(ctx)
		start := time.Now()
		if landed, err := w.WaitWithin(f); landed || err != nil {
			t.Fatalf("WaitWithin a flight that never lands: %v, %v; want false, nil (the budget, 100ms, ends first)", landed, err)
		}
		if waited := time.Since(start); waited != 100*time.Millisecond {
			t.Errorf("WaitWithin waited %s, want the budget, 100ms", waited)
		}
		if w.MayWait() {
			t.Error("MayWait after the budget was spent")
		}
		if err := w.Wait(f); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait: %v, want the context's deadline", err)
		}
		if waited := time.Since(start); waited != 200*time.Millisecond {
			t.Errorf("Wait returned %s after the first wait began, want at the context's end, 200ms", waited)
		}
	})
}
