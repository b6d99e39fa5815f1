package rls

import (
	"sync"
	"sync/atomic"
	"time"
)

// breaker stops calls from waiting on a store that keeps failing: after
// threshold consecutive failures it opens for coolDown, during which no
// call asks the store; then one call probes, and its outcome closes or
// reopens it. It behaves as package interceptor's breaker does; it is a
// separate small copy because that one is unexported and tuned (lock-free
// fast path) for per-call use in the interceptors.
type breaker struct {
	threshold int // 0 disables the breaker
	coolDown  time.Duration
	now       func() time.Time

	// isOpen and failing mirror open and failures > 0 so that the common
	// case, a closed breaker and a store that answers, takes no lock.
	isOpen  atomic.Bool
	failing atomic.Bool

	mu       sync.Mutex
	failures int
	open     bool
	probing  bool
	openedAt time.Time
}

// allow reports whether this call may ask the store and whether it is the
// probe; a call that gets ok must report with done.
func (b *breaker) allow() (ok, probe bool) {
	if b.threshold <= 0 || !b.isOpen.Load() {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.open:
		return true, false // closed since the unlocked check
	case b.probing || b.now().Sub(b.openedAt) < b.coolDown:
		return false, false
	}
	b.probing = true
	return true, true
}

// done records a store call's outcome: failed when the store erred or timed
// out, noNews when the caller went away first (which says nothing about
// the store).
func (b *breaker) done(probe, failed, noNews bool) {
	if b.threshold <= 0 || (!probe && !failed && !b.failing.Load()) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
		switch {
		case noNews: // let the next call probe at once
		case failed:
			b.openedAt = b.now()
		default:
			b.setOpen(false)
			b.setFailures(0)
		}
		return
	}
	if b.open || noNews {
		return // only the probe moves an open breaker
	}
	if !failed {
		b.setFailures(0)
		return
	}
	b.setFailures(b.failures + 1)
	if b.failures >= b.threshold {
		b.openedAt = b.now()
		b.setOpen(true)
	}
}

func (b *breaker) setOpen(open bool) { b.open = open; b.isOpen.Store(open) }

func (b *breaker) setFailures(n int) { b.failures = n; b.failing.Store(n > 0) }
