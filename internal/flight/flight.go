// Package flight lets one caller ask a store for an answer while the other
// callers that need the same answer wait for it, each within a budget: many
// callers cost one round trip, and none waits for another's answer so long
// that it has no time left to ask the store itself.
package flight

import (
	"context"
	"time"
)

// MaxWait is the budget of a caller whose context has no deadline.
const MaxWait = 50 * time.Millisecond

// Budget is how long a caller under ctx may spend waiting for other callers'
// answers: half the time ctx has left, so that it still has time for a round
// trip of its own, or MaxWait when ctx has no deadline.
func Budget(ctx context.Context) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return MaxWait
	}
	return max(time.Until(deadline)/2, 0)
}

// A Flight is the question one caller is asking the store on behalf of the
// callers waiting for its answer. The caller that starts it lands it once,
// when the answer is in or the question failed.
type Flight struct{ landed chan struct{} }

// Start returns a new Flight.
func Start() *Flight { return &Flight{landed: make(chan struct{})} }

// Land wakes every caller waiting for f. It must be called exactly once.
func (f *Flight) Land() { close(f.landed) }

// Landed returns a channel closed once f lands.
func (f *Flight) Landed() <-chan struct{} { return f.landed }

// A Waiter is one caller waiting for flights, one after another, within its
// Budget, counted from its first wait.
type Waiter struct {
	ctx   context.Context
	until time.Time // when the budget is spent; zero before the first wait
}

// NewWaiter returns the Waiter of a caller under ctx.
func NewWaiter(ctx context.Context) Waiter { return Waiter{ctx: ctx} }

// MayWait reports whether the caller may wait for a flight: it has not
// waited yet, or its budget is not spent.
func (w *Waiter) MayWait() bool { return w.until.IsZero() || time.Now().Before(w.until) }

// Wait waits until f lands (nil) or the caller's context ends (its error),
// however long that takes: the budget bounds only when a caller may start
// waiting (MayWait).
func (w *Waiter) Wait(f *Flight) error {
	w.start()
	select {
	case <-f.landed:
		return nil
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
}

// WaitWithin is Wait until the budget is spent: then it returns false and
// no error, and the caller asks the store itself.
func (w *Waiter) WaitWithin(f *Flight) (landed bool, err error) {
	w.start()
	t := time.NewTimer(time.Until(w.until))
	defer t.Stop()
	select {
	case <-f.landed:
		return true, nil
	case <-t.C:
		return false, nil
	case <-w.ctx.Done():
		return false, w.ctx.Err()
	}
}

// start begins the budget at the first wait.
func (w *Waiter) start() {
	if w.until.IsZero() {
		w.until = time.Now().Add(Budget(w.ctx))
	}
}
