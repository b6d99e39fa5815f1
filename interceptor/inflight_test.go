package interceptor_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/enginetest"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/keyfunc"
)

// oneInFlight lets each tenant run one Say at a time, its seat living ttl
// between renewals.
func oneInFlight(ttl time.Duration) interceptor.Rule {
	return interceptor.Rule{
		Name:     "in-flight",
		Methods:  []string{echo.SayMethod},
		Key:      keyfunc.Metadata(tenantHeader),
		InFlight: interceptor.InFlight{Max: 1, SeatTimeout: ttl},
	}
}

// inUse returns the seats Peek says tenant holds under rule.
func (u *unit) inUse(t *testing.T, rule, tenant string) int64 {
	t.Helper()
	qs, err := u.l.Peek(context.Background(), rule, interceptor.Caller{Value: tenant})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.InFlight {
			if q.MaxInFlight != 1 || q.Available != 1-q.InUse || q.Decision.Allowed != (q.InUse == 0) {
				t.Errorf("Peek in-flight quota %+v is inconsistent", q)
			}
			return q.InUse
		}
	}
	t.Fatalf("Peek(%s, %s) = %+v: no in-flight quota", rule, tenant, qs)
	return 0
}

// blocked starts a call from tenant whose handler runs until the returned
// release is called; it returns once the handler runs. done has the
// call's error.
func (u *unit) blocked(tenant string) (release func(), done <-chan error) {
	started, free, ended := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		ended <- u.call(tenant, echo.SayMethod, func(context.Context, any) (any, error) {
			close(started)
			<-free
			return "ok", nil
		})
	}()
	select {
	case <-started:
	case err := <-ended:
		ended <- err
	}
	return func() { close(free) }, ended
}

// A long call's seat is renewed every third of its TTL: outcome "renewed"
// when the store moved its expiry on, "renew_failed" when the store
// failed, "lost" when the seat had expired before the renewal. The hold
// time is the clock's.
func TestSeatRenewedRenewFailedLost(t *testing.T) {
	const ttl = 3 * time.Second
	u := newUnit(t, interceptor.WithRules(oneInFlight(ttl)))
	seats := func() map[string]int64 { return u.m.counts(t, telemetry.MetricSeats, telemetry.AttrSeatOutcome) }
	release, done := u.blocked("a")
	if got := u.inUse(t, "in-flight", "a"); got != 1 {
		t.Fatalf("in use = %d while the call runs, want 1", got)
	}
	wantCode(t, u.call("a", echo.SayMethod, ok), codes.ResourceExhausted, "in-flight")
	wantCounts(t, "seats", seats(), map[string]int64{"acquired": 1, "denied": 1})

	u.clk.Advance(ttl / 3) // renewals fire within Advance
	wantCounts(t, "seats", seats(), map[string]int64{"acquired": 1, "denied": 1, "renewed": 1})

	u.st.failRenew.Store(true)
	u.clk.Advance(ttl / 3)
	wantCounts(t, "seats", seats(), map[string]int64{"acquired": 1, "denied": 1, "renewed": 1, "renew_failed": 1})
	u.st.failRenew.Store(false)

	// The last renewal moved the expiry to 1s+ttl; the next one comes
	// after it.
	u.clk.Advance(ttl + ttl/3 - 1)
	if got := u.inUse(t, "in-flight", "a"); got != 0 {
		t.Errorf("in use = %d after the seat expired, want 0", got)
	}
	wantCounts(t, "seats", seats(), map[string]int64{"acquired": 1, "denied": 1, "renewed": 1, "renew_failed": 1, "lost": 1})

	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	u.flush(t)
	wantCounts(t, "seats", seats(), map[string]int64{"acquired": 1, "denied": 1, "renewed": 1, "renew_failed": 1, "lost": 1, "released": 1})
	held := 2*ttl - 1 // every Advance above
	if n, sum := u.m.histogram(t, telemetry.MetricSeatHold); n != 1 || sum != held.Seconds() {
		t.Errorf("hold = %d values summing to %gs, want 1 of %gs", n, sum, held.Seconds())
	}
}

// A renewal waiting on the store never holds up the end of its call: the
// call returns, and its seat is released, while the renewal's store call
// is still out.
func TestSeatRenewalDoesNotHoldTheCallsEnd(t *testing.T) {
	const ttl = 3 * time.Second
	u := newUnit(t, interceptor.WithRules(oneInFlight(ttl)))
	release, done := u.blocked("a")
	hold := &renewHold{renewing: make(chan struct{}), release: make(chan struct{})}
	u.st.holdRenew.Store(hold)
	advanced := make(chan struct{})
	go func() {
		defer close(advanced)
		u.clk.Advance(ttl / 3) // the renewal runs here and waits on the store
	}()
	<-hold.renewing
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the call's end waited for the seat renewal's store call")
	}
	u.st.holdRenew.Store(nil)
	close(hold.release)
	<-advanced
	u.flush(t)
	if got := u.inUse(t, "in-flight", "a"); got != 0 {
		t.Errorf("in use = %d after the call ended, want 0", got)
	}
	seats := u.m.counts(t, telemetry.MetricSeats, telemetry.AttrSeatOutcome)
	if seats["lost"] != 0 {
		t.Errorf("seat outcomes %v: a renewal that finds its call ended is not a lost seat", seats)
	}
}

// A release the store fails is retried until SettleRetryFor, then
// dropped: outcome "release_failed", and the seat stays taken until it
// expires by itself.
func TestSeatReleaseFailed(t *testing.T) {
	const ttl = time.Minute
	u := newUnit(t, interceptor.WithRules(oneInFlight(ttl)))
	seats := func() map[string]int64 { return u.m.counts(t, telemetry.MetricSeats, telemetry.AttrSeatOutcome) }
	u.st.failRelease.Store(true)
	if err := u.call("a", echo.SayMethod, ok); err != nil {
		t.Fatal(err)
	}
	u.clk.WaitTimer(t, start.Add(enginetest.FirstRetry)) // the first release failed
	u.clk.Advance(enginetest.SettleRetryFor)
	u.clk.WaitTimer(t, start.Add(enginetest.SettleRetryFor+2*enginetest.FirstRetry))
	wantCounts(t, "seats", seats(), map[string]int64{"acquired": 1})
	u.clk.Advance(2 * enginetest.FirstRetry)
	u.flush(t)
	closeLimiter(t, u.l)
	wantCounts(t, "seats", seats(), map[string]int64{"acquired": 1, "release_failed": 1})

	if got := u.inUse(t, "in-flight", "a"); got != 1 {
		t.Errorf("in use = %d after the release was dropped, want 1 until the seat expires", got)
	}
	u.clk.Advance(ttl)
	if got := u.inUse(t, "in-flight", "a"); got != 0 {
		t.Errorf("in use = %d once the seat's TTL passed, want 0", got)
	}
}
