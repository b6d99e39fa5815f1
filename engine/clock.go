package engine

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/internal/enginehooks"
)

// clock is the Limiter's time for its own decisions: when a seat was taken
// and for how long it was held, when the overrides were last confirmed and
// whether one expired, when end-of-call work is retried or dropped, and
// the timers that renew seats, pace the sender and hold back shaped
// streams. Config.Clock replaces what it reads; tests replace its timers too,
// so that they advance time instead of sleeping. A call's own deadline
// stays the context's, in real time.
type clock struct {
	now       func() time.Time
	afterFunc func(d time.Duration, f func()) timer
}

// timer is a pending call of a function (time.AfterFunc's *time.Timer).
type timer = enginehooks.Timer

func init() {
	enginehooks.WithTimers = func(now func() time.Time, afterFunc func(time.Duration, func()) timer) any {
		return func(c *Config) { c.Clock, c.timers = now, afterFunc }
	}
	enginehooks.SettleRetryFor, enginehooks.FirstRetry = settleRetryFor, firstRetry
}

// realClock is the clock of the standard library.
func realClock() clock {
	return clock{now: time.Now, afterFunc: func(d time.Duration, f func()) timer { return time.AfterFunc(d, f) }}
}

// since is the time elapsed since t.
func (c clock) since(t time.Time) time.Duration { return c.now().Sub(t) }

// until is the time left until t.
func (c clock) until(t time.Time) time.Duration { return t.Sub(c.now()) }

// sleep waits for d or until ctx is done, whichever is first, and then
// returns ctx's error.
func (c clock) sleep(ctx context.Context, d time.Duration) error {
	done := make(chan struct{})
	t := c.afterFunc(d, func() { close(done) })
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
