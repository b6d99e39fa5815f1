package interceptor

import (
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fakeclock"
)

// Constants the tests of the end-of-call sender assert against.
const (
	SettleRetryFor = settleRetryFor
	FirstRetry     = firstRetry
)

// FakeClock is a fakeclock.Clock that also arms timers: a timer fires when
// Advance moves the clock to or past its time, in Advance's goroutine, so
// that what it does (a seat's renewal, a wake-up of the sender) is done
// when Advance returns. Give its Now to the store (store.WithClock) and the
// clock itself to the Limiter (WithFakeClock).
type FakeClock struct {
	*fakeclock.Clock

	mu      sync.Mutex
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever a timer is armed
}

// NewFakeClock returns a clock reading start, with no timer armed.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{Clock: fakeclock.New(start), changed: make(chan struct{})}
}

// WithFakeClock makes the Limiter read c and arm its timers on it.
func WithFakeClock(c *FakeClock) Option {
	return func(cf *config) { cf.clock = clock{now: c.Now, afterFunc: c.afterFunc} }
}

type fakeTimer struct {
	c       *FakeClock
	f       func()
	due     time.Time
	pending bool
}

func (c *FakeClock) afterFunc(d time.Duration, f func()) timer {
	t := &fakeTimer{c: c, f: f}
	t.Reset(d)
	return t
}

// Stop disarms the timer, and reports whether it was armed.
func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.pending
	t.pending = false
	return was
}

// Reset arms the timer d from now, and reports whether it was armed. A
// timer due now or earlier fires at once, in a goroutine of its own, as
// time.AfterFunc's does.
func (t *fakeTimer) Reset(d time.Duration) bool {
	c := t.c
	c.mu.Lock()
	was := t.pending
	if d <= 0 {
		t.pending = false
		c.mu.Unlock()
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
	c.mu.Unlock()
	return was
}

// Advance moves the clock by d and then fires, earliest first, every timer
// due by then, including those armed by the ones fired.
func (c *FakeClock) Advance(d time.Duration) {
	c.Clock.Advance(d)
	now := c.Now()
	for {
		c.mu.Lock()
		var next *fakeTimer
		for _, t := range c.timers {
			if t.pending && !t.due.After(now) && (next == nil || t.due.Before(next.due)) {
				next = t
			}
		}
		if next == nil {
			c.mu.Unlock()
			return
		}
		next.pending = false
		c.mu.Unlock()
		next.f()
	}
}

// WaitTimer waits until a timer is armed to fire at due, and fails the test
// when none is within 10 seconds: the goroutine that arms it has done what
// comes before.
func (c *FakeClock) WaitTimer(t testing.TB, due time.Time) {
	t.Helper()
	give := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		var armed []time.Duration
		for _, tm := range c.timers {
			if tm.pending {
				if tm.due.Equal(due) {
					c.mu.Unlock()
					return
				}
				armed = append(armed, tm.due.Sub(c.Now()))
			}
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-give:
			t.Fatalf("no timer armed for %s from now; armed: %v", due.Sub(c.Now()), armed)
		}
	}
}
