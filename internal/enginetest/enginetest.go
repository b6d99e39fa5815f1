// Package enginetest is what the tests of every package need of an
// engine.Limiter's insides: a fake clock whose timers they fire, and how
// its end-of-call work is retried.
package enginetest

import (
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/enginehooks"
	"github.com/tollgate/tollgate/internal/fakeclock"
)

// Clock returns what makes a Limiter configured by the engine.Config it
// changes read c and arm its timers on it (an interceptor.Option, too).
// Give c.Now to the store as well (store.WithClock).
func Clock(c *fakeclock.Clock) func(*engine.Config) {
	return enginehooks.WithTimers(c.Now, c.AfterFunc).(func(*engine.Config))
}

// The pacing of end-of-call work the store failed: retried for
// SettleRetryFor, the second attempt FirstRetry after the first.
var (
	SettleRetryFor = enginehooks.SettleRetryFor
	FirstRetry     = enginehooks.FirstRetry
)
