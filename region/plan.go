package region

import (
	"sync"
	"sync/atomic"
	"time"
)

// plan is the share a region holds for one identity and limit, as its
// decisions read it. A plan is never changed: the coordinator swaps in a
// new one, and before it tells the Home of a smaller share it waits until
// no decision still reads the old one (retire, drained), so that the
// share the Home counts is never less than the one decisions use.
type plan struct {
	// share is the rate (units per period) or the window's units held.
	share int64
	// window is the window share is for (windows only).
	window int64
	// until is when a rate's lease ends here; the zero time for none (the
	// floor). A window's share lasts to the window's end.
	until time.Time
	// granted is when the Home last granted it (the zero time: never).
	granted time.Time

	users   atomic.Int64 // decisions reading the plan now
	retired atomic.Bool  // no longer the entry's plan
	once    sync.Once
	drained chan struct{} // closed once retired with no users
}

func newPlan(share, window int64, until, granted time.Time) *plan {
	return &plan{share: share, window: window, until: until, granted: granted, drained: make(chan struct{})}
}

// acquire returns cur's plan, counted as read until release.
func acquire(cur *atomic.Pointer[plan]) *plan {
	for {
		p := cur.Load()
		p.users.Add(1)
		if cur.Load() == p {
			return p
		}
		p.release()
	}
}

// release ends a read of p.
func (p *plan) release() {
	if p.users.Add(-1) == 0 && p.retired.Load() {
		p.once.Do(func() { close(p.drained) })
	}
}

// swap makes next cur's plan and returns a channel closed once no
// decision reads the plan it replaced.
func swap(cur *atomic.Pointer[plan], next *plan) <-chan struct{} {
	old := cur.Swap(next)
	old.retired.Store(true)
	if old.users.Load() == 0 {
		old.once.Do(func() { close(old.drained) })
	}
	return old.drained
}
