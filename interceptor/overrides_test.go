package interceptor_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/internal/enginetest"
	"github.com/tollgate/tollgate/internal/fakeclock"
	"github.com/tollgate/tollgate/store"
)

// unwatched is a store that keeps overrides but announces no change
// (no tollgate.OverrideWatcher): a Limiter over it learns of another
// replica's changes by its refresh alone.
type unwatched struct{ tollgate.OverrideStore }

// replicas returns two Limiters of perTenant (10 calls an hour) on one
// Memory store and one clock: watched sees the store's announcements,
// polled only refreshes its view every refresh.
func replicas(t *testing.T, refresh time.Duration) (clk *fakeclock.Clock, watched, polled *interceptor.Limiter) {
	clk = fakeclock.New(start)
	m := newMemory(t, store.WithClock(clk.Now))
	r := perTenant()
	r.Limits = interceptor.Fixed(tollgate.PerHour(10))
	opts := []interceptor.Option{enginetest.Clock(clk), interceptor.WithRules(r), func(c *engine.Config) { c.OverrideRefresh = refresh }}
	return clk, newLimiter(t, m, opts...), newLimiter(t, unwatched{m}, opts...)
}

// callAs makes one unary Say call from tenant through l.
func callAs(l *interceptor.Limiter, tenant string) error {
	u := unit{l: l}
	return u.call(tenant, echo.SayMethod, ok)
}

// Another replica's change applies at once where the store announces it,
// and exactly when the refresh delay has passed where it does not.
func TestOverrideRefresh(t *testing.T) {
	const refresh = time.Second
	clk, watched, polled := replicas(t, refresh)
	ctx := context.Background()
	for _, l := range []*interceptor.Limiter{watched, polled} {
		if err := callAs(l, "x"); err != nil { // the view is fresh from now
			t.Fatal(err)
		}
	}
	// The watched replica blocks x for a minute.
	if err := watched.Block(ctx, "per-tenant", interceptor.Caller{Value: "x"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	wantCode(t, callAs(watched, "x"), codes.PermissionDenied, "blocked by an override, for 1m0s")
	if err := callAs(polled, "x"); err != nil {
		t.Fatalf("polled replica, its view fresh: %v, want admitted until the refresh", err)
	}
	clk.Advance(refresh - 1)
	if err := callAs(polled, "x"); err != nil {
		t.Fatalf("polled replica just before the refresh: %v, want admitted", err)
	}
	clk.Advance(1)
	wantCode(t, callAs(polled, "x"), codes.PermissionDenied, "blocked by an override, for 59s")

	// The block ends on the clock: at its expiry, on both.
	clk.Advance(time.Minute - refresh - time.Second/2)
	wantCode(t, callAs(polled, "x"), codes.PermissionDenied, "for 1s")
	clk.Advance(time.Second / 2)
	for _, l := range []*interceptor.Limiter{watched, polled} {
		if err := callAs(l, "x"); err != nil {
			t.Fatalf("after the block expired: %v", err)
		}
	}
}

// An override's limits apply to its caller until it expires on the clock,
// Peek and Overrides report it, and DeleteOverride ends it on every
// replica.
func TestOverrideLimitsExpireAndDelete(t *testing.T) {
	clk, watched, polled := replicas(t, time.Second)
	ctx := context.Background()
	vip := interceptor.Caller{Value: "vip"}
	if err := watched.SetOverride(ctx, "per-tenant", vip, []tollgate.Limit{tollgate.PerHour(1)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	os, err := polled.Overrides(ctx, "per-tenant")
	if err != nil {
		t.Fatal(err)
	}
	if len(os) != 1 || os[0].Caller.Value != vip.Value || len(os[0].Limits) != 1 || os[0].Limits[0] != tollgate.PerHour(1) || !os[0].Expires.Equal(start.Add(time.Minute)) {
		t.Fatalf("Overrides = %+v, want vip's PerHour(1) until start+1m", os)
	}
	if err := callAs(watched, "vip"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, callAs(watched, "vip"), codes.ResourceExhausted, "exceeded")
	qs, err := watched.Peek(ctx, "per-tenant", vip)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || !qs[0].Override || qs[0].Limit != tollgate.PerHour(1) || qs[0].Available != 0 || !qs[0].Expires.Equal(start.Add(time.Minute)) {
		t.Fatalf("Peek = %+v, want the override, nothing left", qs)
	}
	clk.Advance(time.Minute)
	qs, err = polled.Peek(ctx, "per-tenant", vip)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || qs[0].Override || qs[0].Limit != tollgate.PerHour(10) || !qs[0].Expires.IsZero() {
		t.Fatalf("Peek after the override expired = %+v, want the rule's limit", qs)
	}

	// A block until deleted, on another caller.
	z := interceptor.Caller{Value: "z"}
	if err := watched.Block(ctx, "per-tenant", z, 0); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	wantCode(t, callAs(polled, "z"), codes.PermissionDenied, "until it is deleted")
	if err := watched.DeleteOverride(ctx, "per-tenant", z); err != nil {
		t.Fatal(err)
	}
	if err := callAs(watched, "z"); err != nil {
		t.Fatalf("after DeleteOverride: %v", err)
	}
	clk.Advance(time.Second)
	if err := callAs(polled, "z"); err != nil {
		t.Fatalf("after DeleteOverride and a refresh: %v", err)
	}
}
