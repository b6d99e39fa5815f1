// Package fakeclock is the clock tests give the stores, the breaker, the
// local tier and the engine: it reads a time that moves only when told,
// arms timers that fire when it moves past them, and is safe for
// concurrent use.
package fakeclock

import (
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/enginehooks"
)

// Clock is a time that moves only by Advance, with timers that fire when
// Advance moves it to or past their time, in Advance's goroutine, so that
// what they do (a seat's renewal, a wake-up of the sender) is done when
// Advance returns.
type Clock struct {
	mu  sync.Mutex
	now time.Time

	tmu     sync.Mutex // guards timers and changed; never held while reading now
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever a timer is armed
}

// New returns a clock reading start, with no timer armed.
func New(start time.Time) *Clock { return &Clock{now: start, changed: make(chan struct{})} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type fakeTimer struct {
	c       *Clock
	f       func()
	due     time.Time
	pending bool
}

func (c *Clock) AfterFunc(d time.Duration, f func()) enginehooks.Timer {
	t := &fakeTimer{c: c, f: f}
	t.Reset(d)
	return t
}

// Stop disarms the timer, and reports whether it was armed.
func (t *fakeTimer) Stop() bool {
	t.c.tmu.Lock()
	defer t.c.tmu.Unlock()
	was := t.pending
	t.pending = false
	return was
}

// Reset arms the timer d from now, and reports whether it was armed. A
// timer due now or earlier fires at once, in a goroutine of its own, as
// time.AfterFunc's does.
func (t *fakeTimer) Reset(d time.Duration) bool {
	c := t.c
	c.tmu.Lock()
	was := t.pending
	if d <= 0 {
		t.pending = false
		c.tmu.Unlock()
		go t.f()
		return was
	}
	t.due, t.pending = c.Now().Add(d), true
	found := false
	for _, o := range c.timers {
		found = found || o == t
	}
	if !found {
		c.timers = append(c.timers, t)
	}
	close(c.changed)
	c.changed = make(chan struct{})
	c.tmu.Unlock()
	return was
}

// Advance moves the clock by d and then fires, earliest first, every timer
// due by then, including those armed by the ones fired.
func (c *Clock) Advance(d time.Duration) {
	c.advance(d)
	now := c.Now()
	for {
		c.tmu.Lock()
		var next *fakeTimer
		for _, t := range c.timers {
			if t.pending && !t.due.After(now) && (next == nil || t.due.Before(next.due)) {
				next = t
			}
		}
		if next == nil {
			c.tmu.Unlock()
			return
		}
		next.pending = false
		c.tmu.Unlock()
		next.f()
	}
}

// WaitTimer waits until a timer is armed to fire at due, and fails the test
// when none is within 10 seconds: the goroutine that arms it has done what
// comes before.
func (c *Clock) WaitTimer(t testing.TB, due time.Time) {
	t.Helper()
	give := time.After(10 * time.Second)
	for {
		c.tmu.Lock()
		var armed []time.Duration
		for _, tm := range c.timers {
			if tm.pending {
				if tm.due.Equal(due) {
					c.tmu.Unlock()
					return
				}
				armed = append(armed, tm.due.Sub(c.Now()))
			}
		}
		changed := c.changed
		c.tmu.Unlock()
		select {
		case <-changed:
		case <-give:
			t.Fatalf("no timer armed for %s from now; armed: %v", due.Sub(c.Now()), armed)
		}
	}
}
