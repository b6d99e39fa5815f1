// Package storetest is the conformance suite every tollgate.Store must pass:
// one table of request sequences and the decisions they must produce.
package storetest

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

// Harness is what the suite needs to drive one store.
type Harness struct {
	// Store is the store under test.
	Store tollgate.Store
	// Advance moves the store's clock forward by d: a fake clock for the
	// Memory store, time.Sleep for Redis (whose clock cannot be moved).
	Advance func(d time.Duration)
	// Slack is how much extra time may pass on a real clock between two
	// steps (0 for a fake clock). Durations in decisions are checked to be
	// within Slack below their exact value.
	Slack time.Duration
}

// Run runs the whole suite against h.
func Run(t *testing.T, h Harness) {
	t.Helper()
}
