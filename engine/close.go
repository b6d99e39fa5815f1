package engine

import (
	"context"
	"fmt"
)

// Close shuts the Limiter down: it stops renewing the in-flight seats of
// calls still running, delivers the settlements and seat releases calls
// owe (retrying a failing store until ctx ends), and stops every goroutine
// and timer the Limiter started. Call it after the server stopped taking
// calls (grpc.Server.GracefulStop). When ctx ends first it returns an
// error naming the settlements and releases still owed, which are dropped,
// logged and counted (a dropped release's seat expires by itself). Calls
// that end after Close have their end-of-call work tried once, at once.
// Close is safe to call more than once.
func (l *Limiter) Close(ctx context.Context) error {
	// The watch of the store's overrides ends first (within the store
	// deadline); then renewals stop and the end-of-call work is drained.
	l.ov.stop()
	l.closeRefused()
	l.overloadTel.close()
	l.renewals.close()
	return l.sender.close(l, ctx)
}

// Flush waits until the settlements and seat releases of the calls that
// ended before it was called have been delivered to the store, asking for
// them to go at once, or until ctx ends (its error). A Peek after Flush
// sees them; so does any call on any replica.
func (l *Limiter) Flush(ctx context.Context) error {
	return l.sender.waitOwed(ctx, nil)
}

// close drains the sender within ctx and stops its goroutine.
func (q *sender) close(l *Limiter, ctx context.Context) error {
	q.mu.Lock()
	q.draining = true
	q.mu.Unlock()
	for {
		q.mu.Lock()
		if !q.running {
			q.closed, q.draining = true, false
			q.mu.Unlock()
			return nil
		}
		stopped := q.stopped
		q.mu.Unlock()
		q.poke() // due work goes at once
		select {
		case <-stopped: // nothing owed any more, or a new end came meanwhile
			continue
		case <-ctx.Done():
		}
		return q.abandon(ctx)
	}
}

// abandon stops the sender once Close's ctx ended: its goroutine drops
// what is still owed, after the pass in progress, which ends within the
// store deadline.
func (q *sender) abandon(ctx context.Context) error {
	q.mu.Lock()
	q.closed, q.draining = true, false
	stopped := q.stopped
	q.mu.Unlock()
	q.poke()
	<-stopped
	q.mu.Lock()
	settles, releases := q.lost[0], q.lost[1]
	q.mu.Unlock()
	if settles+releases == 0 {
		return nil
	}
	return fmt.Errorf("engine: Close: %w: %d settlements and %d seat releases still owed were dropped", ctx.Err(), settles, releases)
}
