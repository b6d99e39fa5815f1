package interceptor_test

import (
	"context"
	"testing"

	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/enginetest"
	"github.com/tollgate/tollgate/internal/telemetry"
)

// settleFree is perTenant with a Settle that makes every call free: a
// settlement gives its unit back.
func settleFree() interceptor.Rule {
	r := perTenant()
	r.Settle = func(context.Context, any, error) (int64, bool) { return 0, true }
	return r
}

// A settlement the store fails is retried with a wait that doubles, and
// applied once the store takes it: outcome "retried" for each failed
// attempt and "applied" once, and the unit is given back. The second
// attempt comes FirstRetry after the first, the third twice that later.
func TestSettleRetriedThenApplied(t *testing.T) {
	u := newUnit(t, interceptor.WithRules(settleFree()))
	u.st.failSettle.Store(true)
	if err := u.call("a", echo.SayMethod, ok); err != nil {
		t.Fatal(err)
	}
	first := enginetest.FirstRetry
	u.clk.WaitTimer(t, start.Add(first))
	wantCounts(t, "settles", u.m.counts(t, telemetry.MetricSettles, telemetry.AttrSettleOutcome), map[string]int64{"retried": 1})
	if got := u.available(t, "per-tenant", "a"); got != 2 {
		t.Fatalf("available = %d, want 2: the settlement is not applied yet", got)
	}
	// Not a moment before it is due.
	u.clk.Advance(first - 1)
	if n := u.st.settleCalls.Load(); n != 1 {
		t.Fatalf("%d settle attempts before the retry was due, want 1", n)
	}
	u.clk.Advance(1)
	// The second attempt fails too; the wait doubles.
	u.clk.WaitTimer(t, start.Add(first+2*first))
	wantCounts(t, "settles", u.m.counts(t, telemetry.MetricSettles, telemetry.AttrSettleOutcome), map[string]int64{"retried": 2})

	u.st.failSettle.Store(false)
	u.clk.Advance(2 * first)
	u.flush(t)
	wantCounts(t, "settles", u.m.counts(t, telemetry.MetricSettles, telemetry.AttrSettleOutcome), map[string]int64{"retried": 2, "applied": 1})
	wantCounts(t, "units", u.m.counts(t, telemetry.MetricSettledUnits, telemetry.AttrCostKind), map[string]int64{"reserved": 1, "final": 0})
	if n := u.st.settleCalls.Load(); n != 3 {
		t.Errorf("%d settle attempts, want 3", n)
	}
	if got := u.available(t, "per-tenant", "a"); got != 3 {
		t.Errorf("available = %d, want 3: the unit given back", got)
	}
}

// A settlement the store fails for SettleRetryFor is dropped: outcome
// "dropped", its units counted as dropped, and the reservation stands.
func TestSettleDroppedAfterRetryFor(t *testing.T) {
	u := newUnit(t, interceptor.WithRules(settleFree()))
	u.st.failSettle.Store(true)
	if err := u.call("a", echo.SayMethod, ok); err != nil {
		t.Fatal(err)
	}
	u.clk.WaitTimer(t, start.Add(enginetest.FirstRetry))
	// At the deadline it is retried, not dropped; the wait doubled.
	u.clk.Advance(enginetest.SettleRetryFor)
	u.clk.WaitTimer(t, start.Add(enginetest.SettleRetryFor+2*enginetest.FirstRetry))
	wantCounts(t, "settles", u.m.counts(t, telemetry.MetricSettles, telemetry.AttrSettleOutcome), map[string]int64{"retried": 2})
	// The attempt past it fails: dropped.
	u.clk.Advance(2 * enginetest.FirstRetry)
	u.flush(t)
	closeLimiter(t, u.l) // the drop is recorded once the sender's goroutine ended
	wantCounts(t, "settles", u.m.counts(t, telemetry.MetricSettles, telemetry.AttrSettleOutcome), map[string]int64{"retried": 3, "dropped": 1})
	wantCounts(t, "units", u.m.counts(t, telemetry.MetricSettledUnits, telemetry.AttrCostKind), map[string]int64{"dropped_reserved": 1, "dropped_final": 0})
	if got := u.available(t, "per-tenant", "a"); got != 2 {
		t.Errorf("available = %d, want 2: the reservation stands", got)
	}
}

// The handler's ReportCost is what SettleReported settles: the call's
// reservation of 1 becomes 3.
func TestSettleReported(t *testing.T) {
	r := perTenant()
	r.Settle = interceptor.SettleReported
	u := newUnit(t, interceptor.WithRules(r))
	if err := u.call("a", echo.SayMethod, func(ctx context.Context, _ any) (any, error) {
		interceptor.ReportCost(ctx, 2)
		interceptor.ReportCost(ctx, 1)
		return "ok", nil
	}); err != nil {
		t.Fatal(err)
	}
	u.flush(t)
	if got := u.available(t, "per-tenant", "a"); got != 0 {
		t.Errorf("available = %d, want 0: the call cost 3", got)
	}
	wantCounts(t, "units", u.m.counts(t, telemetry.MetricSettledUnits, telemetry.AttrCostKind), map[string]int64{"reserved": 1, "final": 3})
}
