package flight

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	if got := Budget(context.Background()); got != MaxWait {
		t.Errorf("without a deadline: %s, want %s", got, MaxWait)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if got := Budget(ctx); got <= 400*time.Millisecond || got > 500*time.Millisecond {
		t.Errorf("with 1s left: %s, want about 500ms", got)
	}
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if got := Budget(past); got != 0 {
		t.Errorf("past the deadline: %s, want 0", got)
	}
}

func TestWaitForALanding(t *testing.T) {
	f := Start()
	go func() {
		time.Sleep(time.Millisecond)
		f.Land()
	}()
	w := NewWaiter(context.Background())
	if !w.MayWait() {
		t.Fatal("a caller that never waited may not wait")
	}
	if err := w.Wait(f); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if landed, err := w.WaitWithin(f); !landed || err != nil {
		t.Fatalf("WaitWithin a landed flight: %v, %v", landed, err)
	}
}

// Wait outlasts the budget; only the context ends it. WaitWithin ends with
// the budget, and MayWait is false from then on.
func TestWaitWithinTheBudget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	f := Start()
	defer f.Land()
	w := NewWaiter(ctx)
	if landed, err := w.WaitWithin(f); landed || err != nil {
		t.Fatalf("WaitWithin a flight that never lands: %v, %v; want false, nil (the budget, 100ms, ends first)", landed, err)
	}
	if w.MayWait() {
		t.Error("MayWait after the budget was spent")
	}
	if err := w.Wait(f); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait: %v, want the context's deadline", err)
	}
}
