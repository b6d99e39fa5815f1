package lease

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/store"
	"github.com/tollgate/tollgate/store/storetest"
)

// The conformance suite, as every store runs it, on a lease.Store over the
// Memory store: with the defaults, where the suite's identities stay cold
// and every decision is the inner store's, it passes whole.
func TestConformance(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	inner := newMemory(t, store.WithClock(clock.Now))
	storetest.Run(t, storetest.Harness{
		Store:      mustNew(t, inner, WithClock(clock.Now)),
		Advance:    clock.Advance,
		MaxReplays: 4, // the store's default
	})
}

// leaseReset is why a case whose token bucket or GCRA admits from a lease
// does not run: the decision reports the lease's ResetAfter, not its own.
const leaseReset = "a decision admitted from a lease reports ResetAfter as the inner store's at the lease (several units debited at once) less the time since, not the wait after this decision's own cost (lease.Store's documented answer)"

// The suite with every identity hot from its first decision and leases of
// up to half a limit, so that the suite's small limits are leased: what it
// admits is exactly what the inner store would, and the cases that check an
// admission's ResetAfter, or a debt counted to the unit, are skipped with
// the reason.
func TestConformanceLeasing(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	inner := newMemory(t, store.WithClock(clock.Now))
	storetest.Run(t, storetest.Harness{
		Store:      mustNew(t, inner, WithClock(clock.Now), WithHotThreshold(0, time.Second), WithMaxShare(0.5)),
		Advance:    clock.Advance,
		MaxReplays: 4, // the store's default
		Skip: map[string]string{
			"sequences/token_bucket/fresh_bucket":         leaseReset,
			"sequences/token_bucket/burst_to_empty":       leaseReset,
			"sequences/token_bucket/refill_after_advance": leaseReset,
			"sequences/gcra/fresh_bucket":                 leaseReset,
			"sequences/gcra/burst_to_empty":               leaseReset,
			"sequences/gcra/refill_after_advance":         leaseReset,
			"settle/settle_past_empty": "the units of the lease the admission came from, debited in the inner store and not spent yet, " +
				"are owed too: settled 14 past the reservation, the identity owes 5 and the lease's unspent unit",
		},
	})
}
