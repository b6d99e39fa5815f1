// Package enginehooks lets the tests of every package reach into an
// engine.Limiter: give it a clock whose timers they fire, and read how its
// end-of-call work is retried. Package engine sets the hooks when it loads;
// nothing else writes them.
package enginehooks

import "time"

// Timer is a pending call of a function, as time.AfterFunc's *time.Timer.
type Timer interface {
	// Stop prevents the call, and reports whether it did.
	Stop() bool
	// Reset makes the call due d from now, and reports whether it was
	// pending.
	Reset(d time.Duration) bool
}

var (
	// WithTimers returns a func(*engine.Config) that makes a Limiter read
	// now and arm its timers with afterFunc.
	WithTimers func(now func() time.Time, afterFunc func(d time.Duration, f func()) Timer) any
	// SettleRetryFor is how long end-of-call work the store failed is
	// retried before it is dropped; FirstRetry the wait before its second
	// attempt.
	SettleRetryFor, FirstRetry time.Duration
)
