// Package fakeclock is the clock tests give the stores, the breaker and the
// local tier: it reads a time that moves only when told, and is safe for
// concurrent use.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a time that moves only by Advance.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock reading start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
