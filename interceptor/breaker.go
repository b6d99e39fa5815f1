package interceptor

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

// breaker stops calls from waiting on a store that keeps failing. It is
// shared by every rule of a Limiter, because they share the store.
type breaker struct {
	threshold int           // consecutive failures that open it; 0 disables it
	coolDown  time.Duration // how long it stays open before a probe
	now       func() time.Time

	// state is read without the lock on the hot path; it is written only
	// under mu.
	state atomic.Uint32
	// failing is true while failures > 0, so that a success in the closed
	// state, the common case, takes no lock.
	failing atomic.Bool

	mu       sync.Mutex
	failures int
	openedAt time.Time
}

func newBreaker(threshold int, coolDown time.Duration) *breaker {
	return &breaker{threshold: threshold, coolDown: coolDown, now: time.Now}
}

// allow reports whether this call may ask the store, and whether it is the
// one probe of a breaker that was open. A call that gets ok must report its
// outcome with done.
func (b *breaker) allow() (ok, probe bool) {
	if b.threshold <= 0 || breakerState(b.state.Load()) == closed {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch breakerState(b.state.Load()) {
	case closed:
		return true, false
	case open:
		if b.now().Sub(b.openedAt) >= b.coolDown {
			b.state.Store(uint32(probing))
			return true, true
		}
	}
	return false, false
}

// storeResult is what a store call told the breaker.
type storeResult uint8

const (
	storeOK     storeResult = iota // the store decided
	storeFailed                    // the store erred or timed out
	storeNoNews                    // the caller went away first: says nothing about the store
)

// done records the outcome of a call that allow let through.
func (b *breaker) done(probe bool, res storeResult) {
	if b.threshold <= 0 || (res == storeOK && !probe && !b.failing.Load()) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		switch res {
		case storeOK:
			b.close()
		case storeFailed:
			b.trip()
		case storeNoNews:
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
	case storeOK:
		b.close()
	case storeFailed:
		b.failures++
		b.failing.Store(true)
		if b.failures >= b.threshold {
			b.trip()
		}
	}
}

func (b *breaker) close() {
	b.failures = 0
	b.failing.Store(false)
	b.state.Store(uint32(closed))
}

func (b *breaker) trip() {
	b.openedAt = b.now()
	b.state.Store(uint32(open))
}
