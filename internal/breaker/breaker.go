// Package breaker is the circuit breaker of the store-call policy (package
// storecall) in front of a store: after consecutive failures it stops calls
// from waiting on the store until a cool-down has passed, then lets one call
// probe it.
//
// Failures are consecutive in time, not in number: a call's failure counts
// only when no failure was counted since the call was let through. Calls
// that were waiting on the store together when it stalled once (a slow
// moment, the first calls of a cold connection pool) fail together, and
// count as one failure, however many there were: with 64 calls in flight,
// one stall of the store deadline would otherwise open the breaker, and a
// FailOpen rule would then admit every call of the cool-down unasked.
package breaker

import (
	"sync"
	"sync/atomic"
	"time"
)

// breakerState is the state of the circuit breaker.
type breakerState uint32

const (
	// closed: every call asks the store; consecutive failures are counted.
	closed breakerState = iota
	// open: no call asks the store until the cool-down has passed.
	open
	// probing: one call is asking the store; the others do not.
	probing
)

// Breaker stops calls from waiting on a store that keeps failing. One
// Breaker guards one store, whoever its callers are. It is safe for
// concurrent use; the zero threshold disables it.
type Breaker struct {
	threshold int           // consecutive failures that open it; 0 disables it
	coolDown  time.Duration // how long it stays open before a probe
	now       func() time.Time

	// state is read without the lock on the hot path; it is written only
	// under mu.
	state atomic.Uint32
	// failing is true while failures > 0, so that a success in the closed
	// state, the common case, takes no lock.
	failing atomic.Bool
	// counted is how many failures were ever counted: a call's Ticket
	// holds it as of Allow, and its failure counts only if it is unchanged
	// (written under mu).
	counted atomic.Uint64

	mu       sync.Mutex
	failures int
	openedAt time.Time
}

// New returns a breaker that opens after threshold consecutive failures
// (0 disables it) and stays open for coolDown before a probe.
func New(threshold int, coolDown time.Duration) *Breaker {
	return &Breaker{threshold: threshold, coolDown: coolDown, now: time.Now}
}

// Ticket is one call that Allow let through, for its Done.
type Ticket struct {
	// Probe: the call is the one probe of a breaker that was open.
	Probe bool
	// counted is Breaker.counted when the call was let through.
	counted uint64
}

// Allow reports whether this call may ask the store, and gives it its
// Ticket, which says whether it is the one probe of a breaker that was open.
// A call that gets ok must report its outcome with Done.
func (b *Breaker) Allow() (t Ticket, ok bool) {
	if b.threshold <= 0 {
		return Ticket{}, true
	}
	if breakerState(b.state.Load()) == closed {
		return Ticket{counted: b.counted.Load()}, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch breakerState(b.state.Load()) {
	case closed:
		return Ticket{counted: b.counted.Load()}, true
	case open:
		if b.now().Sub(b.openedAt) >= b.coolDown {
			b.state.Store(uint32(probing))
			return Ticket{Probe: true, counted: b.counted.Load()}, true
		}
	}
	return Ticket{}, false
}

// Result is what a store call told the breaker.
type Result uint8

const (
	// OK means the store decided.
	OK Result = iota
	// Failed means the store erred or timed out.
	Failed
	// NoNews means the caller went away first, which says nothing about the store.
	NoNews
)

// Done records the outcome of a call that Allow let through with t.
func (b *Breaker) Done(t Ticket, res Result) {
	if b.threshold <= 0 || (res == OK && !t.Probe && !b.failing.Load()) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.Probe {
		switch res {
		case OK:
			b.close()
		case Failed:
			b.trip()
		case NoNews:
			// Let the next call probe at once.
			b.state.Store(uint32(open))
		}
		return
	}
	// Calls that started before the breaker opened report late; only the
	// probe moves an open breaker.
	if breakerState(b.state.Load()) != closed {
		return
	}
	switch res {
	case OK:
		b.close()
	case Failed:
		if t.counted != b.counted.Load() {
			// A failure was counted since this call began: the same stall.
			return
		}
		b.counted.Add(1)
		b.failures++
		b.failing.Store(true)
		if b.failures >= b.threshold {
			b.trip()
		}
	}
}

func (b *Breaker) close() {
	b.failures = 0
	b.failing.Store(false)
	b.state.Store(uint32(closed))
}

func (b *Breaker) trip() {
	b.openedAt = b.now()
	b.state.Store(uint32(open))
}
